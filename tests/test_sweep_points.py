"""Sweeps at design-space scale: each job composed like Hydra would, infeasible points
recorded while the sweep goes on, one line per job, plots drawn on demand."""

from __future__ import annotations

import contextlib
import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from hydra_plugins.npuflow import job
from hydra_plugins.npuflow.pool_launcher import worker_count
from pipeline.configuration.config import checked_values
from pipeline.configuration.schema import register_configs
from pipeline.sweeps.sweep_compose import MemoConfigLoader, own_group
from tests.conftest import CONF, REPO, run_cli

SMALL = ["model=digits_mlp", "data=digits"]

JOBS = [
    ["hardware=rk3588", "compile.tiling.tile_m=16", "quant=int8"],
    ["hardware=edge_tpu", "compile.tiling.tile_m=16", "quant=int8"],
    ["hardware=edge_tpu", "compile.tiling.tile_m=64", "quant=fp16"],
    ["hardware=edge_tpu", "hardware.mac_array.rows=16", "hardware.sram.size_kb=256"],
    ["hardware=rk3588", "+experiment=hardware_dse", "hardware.dram.bandwidth_gbps=4"],
    ["hardware=rk3588", "run.objective=[latency_ms,energy_mj]", "compile.tiling.mode=fixed",
     "hydra.job.chdir=true"],
]


@contextlib.contextmanager
def _hydra() -> Iterator[tuple]:
    """Hydra's own config loader and the multirun's master config, as a sweep sees them."""
    register_configs()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        yield loader, loader.load_configuration("config", ["hydra.sweep.dir=/tmp/x"],
                                                RunMode.MULTIRUN)


@pytest.mark.parametrize("overrides", JOBS, ids=[" ".join(j) for j in JOBS])
def test_a_reused_composition_equals_hydras_own(overrides):
    """The memo composes once per group combination and applies values itself: every key
    of the result, Hydra node included, must equal Hydra's full composition."""
    with _hydra() as (loader, master):
        memo = MemoConfigLoader(loader)
        memo.load_sweep_config(master, ["hardware=rk3588"])  # warm a base to reuse
        expected = loader.load_sweep_config(master, overrides)
        got = memo.load_sweep_config(master, overrides)
        again = memo.load_sweep_config(master, overrides)  # from the memo, not mutated
    for cfg in (got, again):
        assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(expected)
        assert cfg.hydra.overrides.task == expected.hydra.overrides.task
        assert cfg.hydra.job.override_dirname == expected.hydra.job.override_dirname
        assert OmegaConf.get_type(cfg.hardware) is OmegaConf.get_type(expected.hardware)


def test_jobs_share_the_groups_they_do_not_change_read_only_and_write_only_their_own():
    """Two jobs of one composition share the hardware group (read-only, one node) and
    not the groups their values change; a job that writes a shared group writes its own
    copy, and the other job, the shared node and the values resolved from it stay as
    they were. A group with an interpolation (compile's language-model keys) is never
    shared. The job's config.yaml, written group by group with the shared groups' text
    remembered, is byte for byte the whole config's YAML, and the values the door check
    resolves (group by group, shared groups once) equal OmegaConf's own."""
    with _hydra() as (loader, master):
        memo = MemoConfigLoader(loader)
        one, two = (memo.load_sweep_config(master, ["hardware=rk3588", f"simulate.frames={n}"])
                    for n in (2, 3))
    shared = one._get_node("hardware")
    assert shared is two._get_node("hardware") and shared._get_node_flag("readonly")
    assert one._get_node("simulate") is not two._get_node("simulate")
    assert (one.simulate.frames, two.simulate.frames) == (2, 3)
    assert one._get_node("compile") is not two._get_node("compile")  # it interpolates
    assert one.hydra._get_node("job") is not two.hydra._get_node("job")
    assert one.hydra._get_node("hydra_logging") is two.hydra._get_node("hydra_logging")
    task = job.task_config(two)
    before = checked_values(task, {"hardware": "rk3588"})[1]
    assert before == OmegaConf.to_container(task, resolve=True)
    assert job.config_yaml(task) == job.config_yaml(task) == job.to_yaml(task)
    own_group(task, "hardware").frequency_mhz = 500
    assert task.hardware.frequency_mhz == 500
    assert one.hardware.frequency_mhz == shared.frequency_mhz == 1000
    assert shared._get_node_flag("readonly") and task._get_node("hardware") is not shared
    assert checked_values(task, {"hardware": "rk3588"})[1]["hardware"]["frequency_mhz"] == 500
    assert checked_values(job.task_config(one), {"hardware": "rk3588"})[1] == {
        **before, "simulate": OmegaConf.to_container(one.simulate, resolve=True)}
    assert job.config_yaml(task) == job.to_yaml(task)


@pytest.mark.parametrize("overrides", JOBS[:3], ids=[" ".join(j) for j in JOBS[:3]])
def test_the_lean_job_writes_the_yaml_hydra_writes(overrides):
    """hydra_plugins/npuflow/job.py writes a job's .hydra files with libyaml: read back by
    OmegaConf they are the config Hydra's writer would have written (its text may fold a
    long string elsewhere), for whole job configs (Hydra node included) and for the values
    YAML could read back as something else."""
    with _hydra() as (loader, master):
        cfg = loader.load_sweep_config(master, overrides)
    tricky = OmegaConf.create({"a": "1e-3", "b": "yes", "c": "${a}", "d": "12", "e": 1e-4,
                               "f": None, "g": "two\nlines", "h": "ünï", "i": [".5", "off"],
                               "j": "???", "k": "", "l": "0x1F", "m": "1_000"})
    task = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    for node, lean in ((task, job.to_yaml(job.task_config(cfg))),
                       (cfg.hydra, job.to_yaml(cfg.hydra)), (tricky, job.to_yaml(tricky))):
        back = OmegaConf.create(lean)
        hydra_back = OmegaConf.create(OmegaConf.to_yaml(node))
        assert OmegaConf.to_container(back) == OmegaConf.to_container(hydra_back)
    assert job.to_yaml(tricky) == OmegaConf.to_yaml(tricky)  # short values: the same bytes


def _rows(sweep: Path) -> list[dict[str, str]]:
    with (sweep / "summary.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_an_infeasible_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_cli("-m", *SMALL, "compile.tiling.mode=fixed", "hardware.sram.size_kb=1,512",
                   "quant=int8,fp16", f"hydra.sweep.dir={sweep}",
                   f"run.cache_dir={tmp_path / 'cache'}")
    assert proc.returncode == 0, proc.stderr
    rows = {r["overrides"]: r for r in _rows(sweep)}
    assert len(rows) == 4
    for quant in ("int8", "fp16"):
        bad = rows[f"hardware.sram.size_kb=1 quant={quant}"]
        assert bad["status"] == "infeasible" and bad["latency_ms"] == ""
        assert "needs" in bad["reason"] and "bytes of SRAM" in bad["reason"]
        assert bad["pareto"] == "False"
        good = rows[f"hardware.sram.size_kb=512 quant={quant}"]
        assert good["status"] == "ok" and float(good["latency_ms"]) > 0
    assert "infeasible: compile.tiling" in (sweep / "summary.md").read_text()
    for row in rows.values():  # the jobs share the simulate group: none wrote into it
        written = OmegaConf.load(sweep / row["job"] / ".hydra" / "config.yaml")
        assert written.simulate.plots is None
    # one line per job (stdout for a result, stderr for an infeasible point), no tables
    job_lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("#")]
    assert len(job_lines) == 4
    assert "where the time goes" not in proc.stdout and "compile:" not in proc.stdout
    assert "2 infeasible" in proc.stdout


def test_a_sweep_where_no_point_runs_fails(tmp_path):
    proc = run_cli("-m", *SMALL, "compile.tiling.mode=fixed", "hardware.sram.size_kb=1,2",
                   f"hydra.sweep.dir={tmp_path / 'sweep'}", f"run.cache_dir={tmp_path / 'c'}")
    assert proc.returncode == 1
    assert "no point of the sweep ran" in proc.stderr
    assert {r["status"] for r in _rows(tmp_path / "sweep")} == {"infeasible"}


def test_a_swept_value_that_is_wrong_on_its_own_stops_before_any_job(tmp_path):
    proc = run_cli("-m", *SMALL, "simulate.frames=4,0", f"hydra.sweep.dir={tmp_path / 's'}",
                   f"run.cache_dir={tmp_path / 'c'}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "npuflow: error: override 'simulate.frames=0': simulate.frames: must be >= 1, got 0")
    assert not list((tmp_path / "s").glob("[0-9]*"))


def test_sweep_jobs_equal_single_runs_and_plots_are_drawn_for_picked_jobs(tmp_path):
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    proc = run_cli("-m", *SMALL, "hardware=rk3588,edge_tpu", f"hydra.sweep.dir={sweep}",
                   f"run.cache_dir={cache}")
    assert proc.returncode == 0, proc.stderr
    single = tmp_path / "single"
    assert run_cli(*SMALL, "hardware=edge_tpu", f"hydra.run.dir={single}",
                   f"run.cache_dir={cache}").returncode == 0
    job = next(r["job"] for r in _rows(sweep) if r["overrides"] == "hardware=edge_tpu")
    assert (sweep / job / "metrics.json").read_bytes() == (single / "metrics.json").read_bytes()
    best = {r["job"] for r in _rows(sweep) if r["job"]}
    drawn = {j for j in best if (sweep / j / "simulate" / "timeline.png").is_file()}
    assert drawn, "the summary draws the plots of the jobs it picks"
    undrawn = sorted(best - drawn)
    for j in undrawn:  # on demand: the same bytes a single run draws
        subprocess.run([sys.executable, "-m", "pipeline.simulator.plots", str(sweep / j)],
                       cwd=REPO, check=True, capture_output=True)
    target = sweep / job / "simulate"
    if not (target / "timeline.png").is_file():
        subprocess.run([sys.executable, "-m", "pipeline.simulator.plots", str(sweep / job)],
                       cwd=REPO, check=True, capture_output=True)
    for png in ("timeline.png", "roofline.png", "layers.png"):
        assert (target / png).read_bytes() == (single / "simulate" / png).read_bytes(), png
    missing = subprocess.run([sys.executable, "-m", "pipeline.simulator.plots", str(tmp_path)],
                             cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 2 and "not a finished npuflow run" in missing.stderr
    assert json.loads((sweep / job / "point.json").read_text())["status"] == "ok"


def test_nsga2_search_over_tiles_and_hardware_keeps_going_past_infeasible_trials(tmp_path):
    """+experiment=hardware_search: Optuna's NSGA-II minimising latency and energy; a
    256 KB SRAM cannot hold some tiles, so some trials are infeasible, and the search
    still finishes with a Pareto front."""
    sweep = tmp_path / "sweep"
    proc = run_cli("-m", "+experiment=hardware_search", *SMALL, "hydra.sweeper.n_trials=8",
                   "hydra.sweeper.sampler.population_size=4", "hardware.sram.size_kb=1,2048",
                   f"hydra.sweep.dir={sweep}", f"run.cache_dir={tmp_path / 'cache'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(sweep)
    assert len(rows) == 8
    statuses = {r["status"] for r in rows}
    assert "ok" in statuses
    front = OmegaConf.load(sweep / "optimization_results.yaml")
    assert front.solutions and all(len(s["values"]) == 2 for s in front.solutions)
    ok = [r for r in rows if r["status"] == "ok"]
    assert any(r["pareto"] == "True" for r in ok)


def test_the_pool_launcher_forks_what_was_asked_and_no_more_than_the_jobs():
    assert worker_count(1, 8) == 1
    assert worker_count(2, 8) == 2
    assert worker_count(4, 3) == 3
    assert 1 <= worker_count(-1, 8) <= 8


def test_pareto_plot_goes_log_when_points_span_a_decade(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from pipeline.sweeps import sweep

    scales: list[tuple[str, str]] = []
    real_save = sweep.save_figure

    def keep_scales(fig, path):
        ax = fig.axes[0]
        scales.append((ax.get_xscale(), ax.get_yscale()))
        real_save(fig, path)

    monkeypatch.setattr(sweep, "save_figure", keep_scales)
    wide = [{"latency_ms": v, "energy_mj": v / 2, "output_cosine": 0.99} for v in (0.2, 3, 40)]
    near = [{"latency_ms": v, "energy_mj": v / 2, "output_cosine": 0.99} for v in (2, 3, 4)]
    sweep._plot(wide, [True, False, False], tmp_path / "wide.png")
    sweep._plot(near, [True, False, False], tmp_path / "near.png")
    assert scales == [("log", "log"), ("linear", "linear")]
    plt.close("all")


def test_pareto_plot_labels_its_front_names_its_accuracy_and_keeps_the_legend_off_the_data(
        tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from pipeline.sweeps import sweep

    seen: list = []
    real_save = sweep.save_figure

    def keep(fig, path):
        fig.canvas.draw()
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent()
        seen.append((len(fig.axes), [t.get_text() for t in ax.texts], ax.get_title(),
                     legend.y1 <= ax.get_window_extent().y0))
        real_save(fig, path)

    monkeypatch.setattr(sweep, "save_figure", keep)
    same = [{"job": str(i), "latency_ms": 1.0 + i, "energy_mj": 3.0 - i, "output_cosine": 0.99}
            for i in range(3)]
    sweep._plot(same, [True, True, False], tmp_path / "same.png")
    varied = [{**r, "accuracy_top1": 0.5 + 0.1 * i} for i, r in enumerate(same)]
    sweep._plot(varied, [True, False, True], tmp_path / "varied.png")
    (axes_same, texts_same, title_same, below_same), (axes_varied, texts_varied, _, _) = seen
    assert axes_same == 1 and axes_varied == 2  # a colour bar only when accuracy varies
    assert {"#0", "#1"} <= set(texts_same) and {"#0", "#2"} <= set(texts_varied)
    assert "output cosine" in title_same and "at every point" in title_same and below_same
    plt.close("all")


def test_a_proxy_accuracy_does_not_put_a_slow_fp16_point_on_the_front():
    from pipeline.sweeps.sweep import pareto

    int8 = {"latency_ms": 12.0, "energy_mj": 5.0, "output_cosine": 0.9996}
    fp16 = {"latency_ms": 64.7, "energy_mj": 20.0, "output_cosine": 1.0}
    assert pareto([int8, fp16]) == [True, False]
    labelled = [{**int8, "accuracy_top1": 0.70}, {**fp16, "accuracy_top1": 0.71}]
    assert pareto(labelled) == [True, True]  # a real accuracy gain is a trade-off
