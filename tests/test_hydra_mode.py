"""Hydra's mode probe is skipped only where it cannot find a mode
(pipeline.running.hydra_mode), and a run composed once is the run composed twice."""

from __future__ import annotations

import json

from pipeline.running.hydra_mode import mode_is_unset
from tests.conftest import REPO, run_cli


def test_the_mode_is_known_unset_only_when_nothing_can_set_it(tmp_path):
    (tmp_path / "compile").mkdir()
    (tmp_path / "compile" / "fixed.yaml").write_text("tiling:\n  mode: fixed\n")
    assert mode_is_unset(["model=mobilenet_v2"], tmp_path)
    assert not mode_is_unset(["hydra.mode=MULTIRUN"], tmp_path)
    assert not mode_is_unset(["--config-dir", "elsewhere", "model=x"], tmp_path)
    assert not mode_is_unset(["-cd=elsewhere"], tmp_path)
    assert not mode_is_unset(["hydra.searchpath=[file:///elsewhere]"], tmp_path)
    (tmp_path / "config.yaml").write_text("hydra:\n  searchpath: [file:///elsewhere]\n")
    assert not mode_is_unset([], tmp_path)  # a file that adds a search path: composed
    (tmp_path / "config.yaml").unlink()
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "grid.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: 'multirun'\n")
    assert not mode_is_unset(["model=mobilenet_v2"], tmp_path)


def test_the_project_s_own_configs_set_no_mode():
    assert mode_is_unset([], REPO / "conf")


def test_a_user_s_config_that_sets_multirun_still_sweeps(tmp_path):
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "two_clocks.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n"
        "      hardware.frequency_mhz: 500,1000\n")
    proc = run_cli("--config-dir", str(tmp_path / "conf"), "+experiment=two_clocks",
                   "model=mobilenet_v2", "quant=none", "simulate.plots=false",
                   f"hydra.sweep.dir={tmp_path / 'sweep'}", f"run.cache_dir={tmp_path / 'c'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    latencies = sorted(json.loads((tmp_path / "sweep" / job / "metrics.json").read_text())
                       ["latency_ms"] for job in ("0", "1"))
    assert latencies[0] < latencies[1]
