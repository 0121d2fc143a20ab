"""The runner: stages from config, atomic stage folders, merged metrics, placeholders."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import UserError
from pipeline.running.registry import build_chain
from pipeline.running.runner import run_pipeline
from tests.conftest import compose_config, error_lines, run_cli


def test_default_chain_is_the_five_stages():
    cfg = compose_config()
    assert [name for name, _ in build_chain(cfg.stages)] == [
        "export", "optimize", "quantize", "compile", "simulate"]


def test_replacing_one_stage_from_the_command_line(tmp_path):
    proc = run_cli("model=bert_encoder",
                   "stages.quantize._target_=tests.custom_stages.CountNodesStage",
                   "+stages.quantize.label=mine",
                   "stages.optimize._target_=pipeline.stages.passthrough.PassThroughStage",
                   f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["custom_label"] == "mine"
    assert metrics["custom_nodes"] == metrics["model_nodes"]
    assert metrics["custom_saw_keys"] == ["model", "run"]  # only its declared subtree
    assert "quantize_stage_implemented" not in metrics
    assert metrics["optimize_stage_implemented"] is False  # placeholders say so
    assert (tmp_path / "optimize" / "NOT_IMPLEMENTED").is_file()
    for stage in ("export", "optimize", "quantize", "compile", "simulate"):
        assert (tmp_path / stage / "metrics.json").is_file()


def test_failing_stage_leaves_no_half_written_folder(tmp_path):
    proc = run_cli("model=digits_mlp",
                   "stages.optimize._target_=tests.custom_stages.FailingStage",
                   f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert error_lines(proc) == ["npuflow: error: failing stage: bad input 'node_7'"]
    assert (tmp_path / "export" / "model.onnx").is_file()
    expected = {"export", "npuflow.log", ".hydra"}
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in expected]
    assert leftovers == []  # no optimize/, no temp folder, no metrics.json


def test_unknown_stage_name_and_target_are_user_errors():
    cfg = compose_config("stages.order=[export,polish]")
    with pytest.raises(UserError, match="unknown stage 'polish'"):
        build_chain(cfg.stages)
    cfg = compose_config("stages.export._target_=no.such.Stage")
    with pytest.raises(UserError, match=r"stages.export._target_: Error locating target"):
        build_chain(cfg.stages)


def test_same_config_gives_byte_identical_metrics(tmp_path):
    cfg = compose_config("model=resnet18", "stages.order=[export]")
    run_pipeline(cfg, tmp_path / "a")
    run_pipeline(cfg, tmp_path / "b")
    a = (tmp_path / "a" / "metrics.json").read_bytes()
    assert a == (tmp_path / "b" / "metrics.json").read_bytes()
    assert (tmp_path / "a" / "export" / "model.onnx").read_bytes() == (
        tmp_path / "b" / "export" / "model.onnx").read_bytes()
    # wall times vary run to run, so they live beside metrics.json, never in it
    timings = json.loads((tmp_path / "a" / "timings.json").read_text())
    assert list(timings) == ["export"] and timings["export"] > 0
    assert not any("second" in k or "time" in k for k in json.loads(a))


def test_console_script_and_module_are_one_app(tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("npuflow", path=str(Path(sys.executable).parent))
    assert exe, "console script npuflow not installed"
    proc = subprocess.run([exe, "model=digits_mlp", "stages.order=[export]",
                           f"hydra.run.dir={tmp_path}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "metrics.json").read_text())["model_name"] == "digits_mlp"
    bad = run_cli("stages.order=[]")
    assert bad.returncode == 2 and "stages.order" in error_lines(bad)[0]


def test_every_metric_a_stage_returns_is_one_it_declares(tmp_path):
    """``Stage.produces`` is what a search objective is checked against before the first
    trial: a stage returning a name it does not declare would make a valid objective fail."""
    from pipeline.running.registry import build_chain
    from tests.conftest import compose_config, run_inprocess

    runs = {"digits": ("model=digits_mlp", "data=digits", "simulate.sustained.seconds=2"),
            "auto": ("model=digits_mlp", "data=digits", "quant.auto.enabled=true",
                     "quant.auto.max_trials=2")}
    for name, args in runs.items():
        code, lines, _ = run_inprocess(f"hydra.run.dir={tmp_path / name}",
                                       f"run.cache_dir={tmp_path / 'cache'}", *args)
        assert code == 0, lines
        for stage_name, stage in build_chain(compose_config(*args).stages):
            returned = json.loads((tmp_path / name / stage_name / "metrics.json").read_text())
            assert set(returned) <= stage.produces, (stage_name, set(returned) - stage.produces)


def test_slices_of_a_grid_share_their_unchanged_groups_and_stay_read_only():
    from omegaconf import OmegaConf
    from omegaconf.errors import ReadonlyConfigError

    from pipeline.running.runner import stage_config

    chain = dict(build_chain(compose_config().stages))
    slices = []
    for tile in (16, 64):
        cfg = compose_config("compile.tiling.mode=fixed", f"compile.tiling.tile_m={tile}")
        resolved = OmegaConf.to_container(cfg, resolve=True)
        sub, values = stage_config(cfg, chain["compile"], resolved)
        assert OmegaConf.to_container(sub) == values == {k: resolved[k] for k in values}
        slices.append(sub)
    first, second = slices
    assert (first.compile.tiling.tile_m, second.compile.tiling.tile_m) == (16, 64)
    assert first._get_node("hardware") is second._get_node("hardware")
    for sub in slices:
        with pytest.raises(ReadonlyConfigError):
            sub.hardware.frequency_mhz = 1
        with pytest.raises(ReadonlyConfigError):
            sub.compile.tiling.tile_m = 1
