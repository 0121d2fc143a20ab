"""A run folder holds one run: a used folder is refused before Hydra writes into it, or
replaced whole with ``run.replace=true``; a folder with anything else in it is never
touched; a sweep folder follows the same rule."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_inprocess as npuflow
from tests.test_bad_inputs import tiny_model

SMALL = ("data.calibration_size=2", "data.eval_size=2", "simulate.plots=false")


def _args(tmp: Path) -> tuple[str, ...]:
    return ("model=onnx", f"model.path={tiny_model(tmp / 't.onnx')}",
            f"run.cache_dir={tmp / 'cache'}", *SMALL)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_used_folder_is_refused_and_left_as_it_was(tmp_path):
    run = tmp_path / "run"
    code, lines, _ = npuflow(f"hydra.run.dir={run}", *_args(tmp_path))
    assert code == 0, lines
    before = _snapshot(run)
    code, lines, _ = npuflow(f"hydra.run.dir={run}", *_args(tmp_path), "quant=fp16")
    assert code == 2 and len(lines) == 1, lines
    assert "hydra.run.dir" in lines[0] and "already holds a run" in lines[0]
    assert "run.replace=true" in lines[0]
    assert _snapshot(run) == before  # not even Hydra's .hydra/ or the log were touched


def test_replace_leaves_only_the_new_runs_stages_and_metrics(tmp_path):
    run = tmp_path / "run"
    assert npuflow(f"hydra.run.dir={run}", *_args(tmp_path))[0] == 0
    assert "conv_0" in (run / "report.html").read_text()  # the first run's kernel table
    code, lines, _ = npuflow(f"hydra.run.dir={run}", *_args(tmp_path), "run.replace=true",
                             "stages.order=[export,optimize]")
    assert code == 0, lines
    assert sorted(p.name for p in run.iterdir() if p.is_dir()) == [".hydra", "export",
                                                                    "optimize"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert "nodes_after" in metrics and "latency_ms" not in metrics
    assert "conv_0" not in (run / "report.html").read_text()  # no kernels: nothing compiled


def test_a_failing_second_run_leaves_nothing_of_the_first(tmp_path):
    run = tmp_path / "run"
    assert npuflow(f"hydra.run.dir={run}", *_args(tmp_path))[0] == 0
    code, lines, _ = npuflow(f"hydra.run.dir={run}", *_args(tmp_path), "run.replace=true",
                             "stages.optimize._target_=tests.custom_stages.FailingStage")
    assert code == 2, lines
    assert sorted(p.name for p in run.iterdir()) == [".hydra", "export", "npuflow.log"]


def test_a_folder_with_someone_elses_files_is_never_emptied(tmp_path):
    run = tmp_path / "mine"
    run.mkdir()
    (run / "notes.txt").write_text("keep me")
    (run / "metrics.json").write_text("{}")
    for extra in ((), ("run.replace=true",)):
        code, lines, _ = npuflow(f"hydra.run.dir={run}", *_args(tmp_path), *extra)
        assert code == 2 and "holds files no npuflow run wrote (notes.txt)" in lines[0], lines
    assert sorted(p.name for p in run.iterdir()) == ["metrics.json", "notes.txt"]


def test_an_empty_existing_folder_is_used(tmp_path):
    run = tmp_path / "empty"
    run.mkdir()
    code, lines, _ = npuflow(f"hydra.run.dir={run}", *_args(tmp_path))
    assert code == 0, lines and (run / "metrics.json").is_file()


def test_a_sweep_folder_is_one_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    args = ("-m", f"hydra.sweep.dir={sweep}", *_args(tmp_path), "simulate.frames=2,3")
    code, lines, _ = npuflow(*args)
    assert code == 0, lines
    code, lines, _ = npuflow(*args)
    assert code == 2 and "hydra.sweep.dir" in lines[-1] and "already holds" in lines[-1]
    code, lines, _ = npuflow(*args, "run.replace=true")
    assert code == 0, lines
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]


def test_a_run_stopped_by_a_mistake_before_any_stage_wrote_gives_the_folder_back(tmp_path):
    """A bad value found at the door (or by export, before it writes) leaves nothing but
    Hydra's .hydra and the log, and those would refuse the corrected run: they go. A run
    that failed after a stage wrote keeps its folder (test above)."""
    run = tmp_path / "run"
    code, lines, _ = npuflow(f"hydra.run.dir={run}", *_args(tmp_path), "simulate.frames=0")
    assert code == 2 and len(lines) == 1 and "simulate.frames" in lines[0], lines
    assert list(run.iterdir()) == []
    code, lines, _ = npuflow(f"hydra.run.dir={run}", *_args(tmp_path))
    assert code == 0, lines
    assert (run / "metrics.json").is_file()


def test_a_sweep_stopped_before_its_first_job_gives_the_folder_back(tmp_path):
    """A point that does not compose (a profile that does not exist) stops the sweep before
    any job ran: its multirun.yaml goes, and the corrected sweep uses the folder."""
    sweep = tmp_path / "sweep"
    args = ("-m", f"hydra.sweep.dir={sweep}", *_args(tmp_path))
    code, lines, _ = npuflow(*args, "hardware=rk3588,no_such_chip")
    assert code == 2 and "no_such_chip" in lines[-1], lines
    assert list(sweep.iterdir()) == []
    code, lines, _ = npuflow(*args, "simulate.frames=2,3")
    assert code == 0, lines
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]


def test_a_file_of_records_reads_back_whole_with_one_record_a_line(tmp_path):
    import json

    from pipeline.artifacts import write_json

    plan = {"graph": "g", "kernels": [{"name": f"k{i}", "cost": {"cycles": i * 1.5}}
                                      for i in range(3)], "memory": {"peak": 7}, "empty": []}
    write_json(tmp_path / "plan.json", plan, rows=True)
    text = (tmp_path / "plan.json").read_text()
    assert json.loads(text) == plan
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and text.endswith("}\n")
    assert sum(line.strip().startswith('{"cost"') for line in lines) == 3  # a kernel a line
    assert [line.split(":")[0].strip() for line in lines if line.startswith('  "')] == \
        ['"empty"', '"graph"', '"kernels"', '"memory"']  # the keys sorted, one a line
    write_json(tmp_path / "again.json", plan, rows=True)
    assert (tmp_path / "again.json").read_bytes() == text.encode()
