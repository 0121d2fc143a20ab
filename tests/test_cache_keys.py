"""A result is never stale: every input a stage's result depends on is in its cache key.

Each test edits one input outside the run (the user's torch module, metric, stage or pass,
an ONNX file's external weights) between two runs that share a cache and checks that the
stages that read it run again and that the result follows the edit, while an unchanged
rerun is served from the cache. Runs are in-process (``conftest.run_inprocess``), as a
notebook or a sweep worker would run them twice; the modules live in ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pipeline import artifacts
from pipeline.running import digest_store
from tests.conftest import run_inprocess as npuflow
from tests.test_bad_inputs import tiny_model

SMALL = ("data.calibration_size=2", "data.eval_size=2", "simulate.plots=false")


def _run(tmp: Path, name: str, *args: str) -> tuple[dict, dict]:
    code, lines, _ = npuflow(f"hydra.run.dir={tmp / name}", f"run.cache_dir={tmp / 'cache'}",
                             *SMALL, *args)
    assert code == 0, "\n".join(lines)
    return (json.loads((tmp / name / "metrics.json").read_text()),
            json.loads((tmp / name / "cache.json").read_text()))


def _module(folder: Path, name: str, source: str, monkeypatch) -> None:
    folder.mkdir(exist_ok=True)
    monkeypatch.syspath_prepend(str(folder))
    (folder / f"{name}.py").write_text(textwrap.dedent(source))


NET = """
    import torch

    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, {channels}, 3, padding=1),
                                   torch.nn.ReLU())
"""


def test_an_edited_torch_module_is_exported_again(tmp_path, monkeypatch):
    _module(tmp_path, "edited_net", NET.format(channels=8), monkeypatch)
    args = ("model=torch", "model.module=edited_net:build", "model.input_shape=[1,3,16,16]")
    first, _ = _run(tmp_path, "a", *args)
    again, cached = _run(tmp_path, "b", *args)
    assert set(cached.values()) == {"hit"} and again == first
    _module(tmp_path, "edited_net", NET.format(channels=16), monkeypatch)
    edited, status = _run(tmp_path, "c", *args)
    assert status["export"] == "miss"
    assert first["model_params"] == 3 * 8 * 9 + 8
    assert edited["model_params"] == 3 * 16 * 9 + 16  # the edited network, not the old one


def test_an_edited_sibling_module_of_a_flat_project_counts(tmp_path, monkeypatch):
    _module(tmp_path, "flat_layers", "WIDTH = 4\n", monkeypatch)
    _module(tmp_path, "flat_net", """
        import torch
        import flat_layers

        def build():
            torch.manual_seed(0)
            return torch.nn.Conv2d(3, flat_layers.WIDTH, 1)
    """, monkeypatch)
    args = ("model=torch", "model.module=flat_net:build", "model.input_shape=[1,3,8,8]")
    first, _ = _run(tmp_path, "a", *args)
    _module(tmp_path, "flat_layers", "WIDTH = 6\n", monkeypatch)
    edited, status = _run(tmp_path, "b", *args)
    assert status["export"] == "miss"
    assert (first["model_params"], edited["model_params"]) == (3 * 4 + 4, 3 * 6 + 6)


METRIC = """
    def score(outputs, labels):
        return {{"mine": {value}}}
"""


def test_an_edited_metric_is_scored_again(tmp_path, monkeypatch):
    _module(tmp_path, "edited_metric", METRIC.format(value=0.25), monkeypatch)
    args = ("model=digits_mlp", "data=digits", "eval.metric._target_=edited_metric.score",
            "~eval.metric.k", "eval.objective=mine")
    first, _ = _run(tmp_path, "a", *args)
    _module(tmp_path, "edited_metric", METRIC.format(value=0.75), monkeypatch)
    edited, status = _run(tmp_path, "b", *args)
    assert status["quantize"] == "miss" and status["optimize"] == "hit"
    assert (first["mine"], edited["mine"]) == (0.25, 0.75)


STAGE = """
    from pipeline.stages.passthrough import PassThroughStage

    class Marked(PassThroughStage):
        def run(self, inputs, cfg, out_dir):
            result = super().run(inputs, cfg, out_dir)
            result.metrics["mark"] = {mark}
            return result
"""

PASS = """
    def scale(model):
        import onnx
        from onnx import numpy_helper
        for init in model.graph.initializer:
            if init.name == "w":
                init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * {factor},
                                                      "w"))
        return model
"""


def test_an_edited_stage_component_or_pass_runs_again(tmp_path, monkeypatch):
    model = tiny_model(tmp_path / "t.onnx")
    # two folders: a flat module's digest covers the modules beside it
    _module(tmp_path / "stages", "edited_stage", STAGE.format(mark=1), monkeypatch)
    _module(tmp_path / "passes", "edited_pass", PASS.format(factor=1), monkeypatch)
    args = ("model=onnx", f"model.path={model}", "stages.quantize._target_=edited_stage.Marked",
            "optimize.passes=[{_target_: edited_pass.scale}]", "optimize.tolerance=100",
            "optimize.abs_tolerance=100")
    first, _ = _run(tmp_path, "a", *args)
    _module(tmp_path / "stages", "edited_stage", STAGE.format(mark=2), monkeypatch)
    marked, status = _run(tmp_path, "b", *args)
    assert status["optimize"] == "hit" and status["quantize"] == "miss"
    assert (first["mark"], marked["mark"]) == (1, 2)
    _module(tmp_path / "passes", "edited_pass", PASS.format(factor=2), monkeypatch)
    _, status = _run(tmp_path, "c", *args)
    assert status["export"] == "hit" and status["optimize"] == "miss"


def _external(path: Path, scale: float) -> None:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((scale * rng.standard_normal((4, 3, 3, 3))).astype(np.float32),
                                "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)


def test_rewritten_external_weights_are_read_again(tmp_path):
    path = tmp_path / "ext" / "model.onnx"
    path.parent.mkdir()
    _external(path, 1.0)
    onnx_bytes = path.read_bytes()
    args = ("model=onnx", f"model.path={path}")
    first, _ = _run(tmp_path, "a", *args)
    weights = path.parent / "weights.bin"
    stamp = weights.stat()
    values = np.frombuffer(weights.read_bytes(), np.float32)
    weights.write_bytes((2 * values).tobytes())  # same size, new values; the .onnx as it was
    assert path.read_bytes() == onnx_bytes
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # as cp -p would
    edited, status = _run(tmp_path, "b", *args)
    assert status["export"] == "miss"
    assert edited["model_output_sha256"] != first["model_output_sha256"]


def test_every_outside_file_is_hashed_once_per_run(tmp_path, monkeypatch):
    """User code, external weights and data images are each read once for the keys of
    the whole run (the per-process digest memo), whatever number of stages list them."""
    path = tmp_path / "ext" / "model.onnx"
    path.parent.mkdir()
    _external(path, 1.0)
    folder = tmp_path / "images" / "a"
    folder.mkdir(parents=True)
    from PIL import Image
    for i in range(4):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(folder / f"{i}.png")
    _module(tmp_path, "hashed_metric", METRIC.format(value=1.0), monkeypatch)
    hashed: list[str] = []
    real = artifacts.hash_file

    def counting(p: Path) -> str:
        hashed.append(str(p))
        return real(p)

    monkeypatch.setattr(digest_store, "hash_file", counting)
    monkeypatch.setattr(artifacts, "hash_file", counting)
    _run(tmp_path, "a", "model=onnx", f"model.path={path}", "data=image_folder",
         f"data.path={tmp_path / 'images'}", "data.calibration_size=1",
         "eval.metric._target_=hashed_metric.score", "~eval.metric.k",
         "eval.objective=mine")
    outside = [h for h in hashed if not h.startswith(str(tmp_path / "a"))
               and "/cache/" not in h]
    assert {Path(h).name for h in outside} >= {"weights.bin", "model.onnx", "0.png",
                                               "hashed_metric.py"}
    assert len(outside) == len(set(outside)), sorted(outside)


def test_the_digest_store_reuses_unchanged_files_and_sees_rewrites(tmp_path, monkeypatch):
    data = tmp_path / "weights.bin"
    data.write_bytes(b"a" * 1000)
    old = data.stat().st_mtime_ns - 10 * 10**9
    os.utime(data, ns=(old, old))
    monkeypatch.setattr(digest_store, "RACY_SECONDS", -1.0)  # the file's ctime is now
    first = digest_store.digest(tmp_path / "cache", data)
    calls: list[Path] = []
    monkeypatch.setattr(digest_store, "hash_file", lambda p: calls.append(p) or "x")
    digest_store._SEEN.clear()  # a new process
    assert digest_store.digest(tmp_path / "cache", data) == first and calls == []
    data.write_bytes(b"b" * 1000)  # same size; mtime put back as a copy tool would
    os.utime(data, ns=(old, old))
    digest_store._SEEN.clear()
    assert digest_store.digest(tmp_path / "cache", data) == "x" and calls == [data]


def test_a_file_changed_just_before_it_was_hashed_is_not_remembered(tmp_path, monkeypatch):
    """git's racily-clean rule: a second edit inside the same timestamp tick would keep
    every stamp but the content; such a file is hashed again on the next run."""
    fresh = tmp_path / "fresh.bin"
    fresh.write_bytes(b"x")
    digest_store.digest(tmp_path / "cache", fresh)
    conn = digest_store._connection(str(tmp_path / "cache"))
    assert conn.execute("SELECT COUNT(*) FROM digests").fetchone()[0] == 0
    monkeypatch.setattr(digest_store, "RACY_SECONDS", -1.0)
    digest_store._SEEN.clear()  # the next run
    digest_store.digest(tmp_path / "cache", fresh)
    assert conn.execute("SELECT COUNT(*) FROM digests").fetchone()[0] == 1
