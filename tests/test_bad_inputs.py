"""Every bad input stopped at the door: exit 2, one line naming the culprit, nothing
half-written. One row per mistake a user makes (config values and choices, profile files,
model files, output folders); the stage cache's corruption is recovered, not reported.

The real CLI entry point runs in this process (``conftest.run_inprocess``), so the table
costs milliseconds per row instead of a Python start-up.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import CONF
from tests.conftest import run_inprocess as npuflow


def tiny_model(path: Path, dims: tuple[int, ...] = (1, 3, 8, 8)) -> Path:
    """Conv 3->4 3x3 + Relu with seeded weights: a full run takes about a second."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv_0", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu_0")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 4, *dims[2:]])],
        [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def profile_file(tmp: Path, edit: Callable[[str], str]) -> list[str]:
    """rk3588.yaml with one textual edit, as ``hardware=bad`` from an extra search path."""
    folder = tmp / "conf" / "hardware"
    folder.mkdir(parents=True, exist_ok=True)
    text = (CONF / "hardware" / "rk3588.yaml").read_text()
    (folder / "bad.yaml").write_text(edit(text.replace("name: rk3588", "name: bad")))
    return [f"hydra.searchpath=[file://{tmp / 'conf'}]", "hardware=bad"]


def derived_file(tmp: Path, body: str) -> list[str]:
    """A profile derived from bad.yaml (see profile_file) by a defaults list: ``hardware=child``."""
    text = f"defaults: [bad, _self_]\nname: child\n{body}\n"
    (tmp / "conf" / "hardware" / "child.yaml").write_text(text)
    return [f"hydra.searchpath=[file://{tmp / 'conf'}]", "hardware=child"]


def model_file(make: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    return lambda tmp: ["model=onnx", f"model.path={make(tmp)}"]


def _external_data_model(tmp: Path) -> Path:
    path = tmp / "ext" / "model.onnx"
    path.parent.mkdir()
    tiny_model(path)
    model = onnx.load(path)
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    (path.parent / "weights.bin").unlink()
    return path


def _empty_graph(tmp: Path) -> Path:
    graph = helper.make_graph([], "empty",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])])
    path = tmp / "empty.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _cycle(tmp: Path) -> Path:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="add_first"),
             helper.make_node("Relu", ["a"], ["b"], name="relu_loops_back"),
             helper.make_node("Identity", ["b"], ["y"], name="out")]
    graph = helper.make_graph(nodes, "cyclic",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp / "cycle.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _file_in_the_way(tmp: Path) -> list[str]:
    (tmp / "afile").write_text("not a folder")
    return [f"hydra.run.dir={tmp / 'afile' / 'run'}"]


def _module(tmp: Path, name: str, source: str) -> Path:
    """A user's Python module in the case's folder (the test puts it on sys.path)."""
    path = tmp / f"{name}.py"
    path.write_text(source)
    return path


def _torch(name: str, source: str, *extra: str) -> Callable[[Path], list[str]]:
    def setup(tmp: Path) -> list[str]:
        _module(tmp, name, source)
        return ["model=torch", f"model.module={name}:build", "model.input_shape=[1,3,8,8]",
                *[e.format(tmp=tmp) for e in extra]]
    return setup


OK_NET = "import torch\ndef build():\n    return torch.nn.Conv2d(3, 4, 3)\n"


def _weights(kind: str) -> Callable[[Path], list[str]]:
    def setup(tmp: Path) -> list[str]:
        import torch

        path = tmp / "w.pt"
        if kind == "list":
            torch.save([1, 2, 3], path)
        else:
            path.write_bytes(b"not a file torch.save wrote")
        return _torch(f"net_for_{kind}_weights", OK_NET, f"model.weights={path}")(tmp)
    return setup


def _estimator(kind: str) -> Callable[[Path], list[str]]:
    def setup(tmp: Path) -> list[str]:
        import joblib
        from sklearn.cluster import KMeans
        from sklearn.linear_model import LogisticRegression

        estimator = KMeans(2, n_init=1).fit(np.random.default_rng(0).random((20, 4))) \
            if kind == "clusterer" else LogisticRegression()
        joblib.dump(estimator, tmp / "est.joblib")
        return ["model=sklearn", f"model.path={tmp / 'est.joblib'}"]
    return setup


def _dynamic_model(tmp: Path) -> Path:
    path = tiny_model(tmp / "dyn.onnx")
    model = onnx.load(path)
    for vi in (model.graph.input[0], model.graph.output[0]):
        for d in vi.type.tensor_type.shape.dim[2:]:
            d.dim_param = "side"
    onnx.save(model, path)
    return path


def _bomb(text: str) -> str:
    """A 'billion laughs' profile: twelve nested nine-fold aliases."""
    lines = ["laugh0: &l0 [ha, ha, ha, ha, ha, ha, ha, ha, ha]"]
    lines += [f"laugh{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 12)]
    return text + "\n" + "\n".join(lines) + "\n"


def _small_folder(tmp: Path) -> list[str]:
    from PIL import Image

    for label in ("a", "b"):
        (tmp / "imgs" / label).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8, 3), 60 * i, np.uint8)).save(
                tmp / "imgs" / label / f"{i}.png")
    return ["data=image_folder", f"data.path={tmp / 'imgs'}", "data.calibration_size=4"]


SYNTAX_ERROR = "def build(:\n    pass\n"


def _writes(name: str, source: str) -> Callable[[Path], list[str]]:
    def setup(tmp: Path) -> list[str]:
        _module(tmp, name, source)
        return []
    return setup


@dataclass
class Case:
    args: list[str] = field(default_factory=list)
    culprit: str = ""  # text the one error line must contain (key, file or node)
    setup: Callable[[Path], list[str]] | None = None  # writes files, returns more args


CASES: dict[str, Case] = {
    # choices: enums in the schema, refused while composing, naming the allowed values
    "objective": Case(["compile.tiling.objective=speed"], "compile.tiling.objective"),
    "placement": Case(["compile.placement=best"], "compile.placement"),
    "tiling_mode": Case(["compile.tiling.mode=manual"], "compile.tiling.mode"),
    "loop_order": Case(["compile.tiling.order=mxk"], "compile.tiling.order"),
    "control_flow": Case(["compile.control_flow=maybe"], "compile.control_flow"),
    "weights_policy": Case(["compile.memory.weights=cached"], "compile.memory.weights"),
    "calibration": Case(["quant.calibration.method=kl"], "quant.calibration.method"),
    "scheme": Case(["quant.scheme=int4"], "quant.scheme"),
    "activation_type": Case(["quant.activation_type=int7"], "quant.activation_type"),
    "float_precision": Case(["quant.float_precision=fp8"], "quant.float_precision"),
    "tensor_override": Case(["+quant.tensor_overrides.x=int3"], "quant.tensor_overrides.x"),
    "data_kind": Case(["data.kind=video"], "data.kind"),
    "data_layout": Case(["data.layout=NCWH"], "data.layout"),
    "channel_order": Case(["data.channel_order=RBG"], "data.channel_order"),
    "model_source": Case(["model.source=hub"], "model.source"),
    "dataflow": Case(["hardware.mac_array.dataflow=rs"], "hardware.mac_array.dataflow"),
    "depthwise_unit": Case(["hardware.mac_array.depthwise.unit=gpu"],
                           "hardware.mac_array.depthwise.unit"),
    "compression": Case(["hardware.weights.compression=zip"], "hardware.weights.compression"),
    # ranges declared beside the field, checked once before the first stage
    "frames_zero": Case(["simulate.frames=0"], "simulate.frames"),
    "pipeline_depth": Case(["simulate.pipeline_depth=-1"], "simulate.pipeline_depth"),
    "preprocess": Case(["simulate.preprocess_ms=-1"], "simulate.preprocess_ms"),
    "postprocess_nan": Case(["simulate.postprocess_ms=nan"], "simulate.postprocess_ms"),
    "calibration_size": Case(["data.calibration_size=0"], "data.calibration_size"),
    "eval_size": Case(["data.eval_size=-1"], "data.eval_size"),
    "std_zero": Case(["data.std=[0.2,0,0.2]"], "data.std[1]"),
    "tile_m_zero": Case(["compile.tiling.mode=fixed", "compile.tiling.tile_m=0"],
                        "compile.tiling.tile_m"),
    "tile_m_negative": Case(["compile.tiling.mode=fixed", "compile.tiling.tile_m=-8"],
                            "compile.tiling.tile_m"),
    "tile_override": Case(["compile.tiling.mode=fixed",
                           "+compile.tiling.overrides.conv_0.tile_m=0"],
                          "compile.tiling.overrides.conv_0.tile_m"),
    "tile_override_key": Case(["+compile.tiling.overrides.conv_0.tile_x=8"],
                              "compile.tiling.overrides.conv_0.tile_x"),
    "tile_k_zero": Case(["compile.tiling.tile_k=0"], "compile.tiling.tile_k"),
    "sram_fraction": Case(["compile.memory.sram_fraction=1.5"], "compile.memory.sram_fraction"),
    "percentile": Case(["quant.calibration.percentile=150"], "quant.calibration.percentile"),
    "num_bins": Case(["quant.calibration.num_bins=0"], "quant.calibration.num_bins"),
    "jump_cosine": Case(["quant.analysis.jump_cosine=2"], "quant.analysis.jump_cosine"),
    "keep_first_n": Case(["quant.keep_first_n=-1"], "quant.keep_first_n"),
    "ort_threads": Case(["run.ort_threads=0"], "run.ort_threads"),
    "tolerance": Case(["optimize.tolerance=-1"], "optimize.tolerance"),
    "max_rounds": Case(["optimize.max_rounds=0"], "optimize.max_rounds"),
    "input_shape_zero": Case(["model.input_shape=[1,3,0,8]"], "model.input_shape[2]"),
    "frequency_inf": Case(["hardware.frequency_mhz=inf"], "hardware.frequency_mhz"),
    "latency_nan": Case(["hardware.dram.latency_ns=nan"], "hardware.dram.latency_ns"),
    "throughput_negative": Case(["hardware.mac_array.throughput.int8=-1"],
                                "hardware.mac_array.throughput.int8"),
    "static_power_inf": Case(["hardware.energy.static_mw=inf"], "hardware.energy.static_mw"),
    "cores_zero": Case(["hardware.cores=0"], "hardware.cores"),
    "cache_over_sram": Case(["hardware.weights.cache_kb=1e9"], "hardware.weights.cache_kb"),
    "lut_rate_zero": Case(["hardware.epilogue.lut_elements_per_cycle=0"],
                          "hardware.epilogue.lut_elements_per_cycle"),
    "lut_unknown_activation": Case(["hardware.epilogue.lut_activations=[Sigmoid,Frob]"],
                                   "hardware.epilogue.lut_activations[1]"),
    "vector_rate_negative": Case(["hardware.vector_unit.output_bytes_per_cycle=-2"],
                                 "hardware.vector_unit.output_bytes_per_cycle"),
    # hardware choices that are not profiles
    "hardware_nan": Case(["hardware=nan"], "hardware"),
    "hardware_unknown": Case(["hardware=nope"], "hardware/nope"),
    # profile files
    "yaml_syntax": Case(culprit="bad.yaml", setup=lambda t: profile_file(
        t, lambda s: s.replace("cols: 32", "cols: [32"))),
    "yaml_tab": Case(culprit="bad.yaml", setup=lambda t: profile_file(
        t, lambda s: s.replace("\n  cols: 32", "\n\tcols: 32"))),
    "profile_inf": Case(culprit="hardware.frequency_mhz", setup=lambda t: profile_file(
        t, lambda s: s.replace("frequency_mhz: 1000", "frequency_mhz: .inf"))),
    "unknown_limit": Case(culprit="hardware.ops.Relu.frobnicate", setup=lambda t: profile_file(
        t, lambda s: s.replace("  Relu: {}", "  Relu: {frobnicate: 3}"))),
    "unknown_op": Case(culprit="hardware.ops.Frobnicate", setup=lambda t: profile_file(
        t, lambda s: s.replace("  Relu: {}", "  Relu: {}\n  Frobnicate: {}"))),
    "no_ops_section": Case(culprit="hardware.ops", setup=lambda t: profile_file(
        t, lambda s: s[:s.index("\nops:")] + s[s.index("\nhost:"):])),
    "derived_missing_parent": Case(culprit="hardware/rk9999", setup=lambda t: profile_file(
        t, lambda s: "defaults: [rk9999, _self_]\n" + s)),
    "derived_bad_override": Case(culprit="hardware.dram.bandwidth_gbps", setup=lambda t: (
        profile_file(t, lambda s: s) and derived_file(t, "dram: {bandwidth_gbps: -1}"))),
    "unknown_profile_key": Case(culprit="hardware.sram.size_kbb", setup=lambda t: profile_file(
        t, lambda s: s.replace("size_kb:", "size_kbb:"))),
    # sustained load: power modes, thermal model, governor
    "trips_not_rising": Case(culprit="hardware.thermal.trips[1].temperature_c",
                             setup=lambda t: profile_file(t, lambda s: s.replace(
                                 "{temperature_c: 95, frequency_mhz: 600}",
                                 "{temperature_c: 80, frequency_mhz: 600}"))),
    "trip_above_clock": Case(["hardware.thermal.trips.0.frequency_mhz=1200"],
                             "hardware.thermal.trips[0].frequency_mhz"),
    "negative_resistance": Case(["hardware.thermal.resistance_c_per_w=-3"],
                                "hardware.thermal.resistance_c_per_w"),
    "unknown_power_mode": Case(["simulate.sustained.power_mode=turbo"],
                               "simulate.sustained.power_mode"),
    "unknown_default_mode": Case(["hardware.default_power_mode=turbo"],
                                 "hardware.default_power_mode"),
    "critical_below_trips": Case(["hardware.thermal.critical_c=90"],
                                 "hardware.thermal.critical_c"),
    # model files
    "model_directory": Case(culprit="is a directory", setup=lambda t: [
        "model=onnx", f"model.path={t}"]),
    "model_missing": Case(culprit="nope.onnx", setup=lambda t: [
        "model=onnx", f"model.path={t / 'nope.onnx'}"]),
    "external_data": Case(culprit="weights.bin", setup=model_file(_external_data_model)),
    "zero_dim": Case(culprit="axis 0", setup=model_file(
        lambda t: tiny_model(t / "zero.onnx", (0, 3, 8, 8)))),
    "empty_graph": Case(culprit="no nodes", setup=model_file(_empty_graph)),
    "cycle": Case(culprit="relu_loops_back", setup=model_file(_cycle)),
    # output folders
    "run_dir_under_file": Case(culprit="afile", setup=_file_in_the_way),
    # the user's code: the module and the exception, at its line
    "torch_factory_raises": Case(culprit="RuntimeError: factory broke (raising_net.py:3)",
                                 setup=_torch("raising_net", "import torch\ndef build():\n"
                                              "    raise RuntimeError('factory broke')\n")),
    "torch_syntax_error": Case(culprit="SyntaxError: invalid syntax (broken_net.py:1)",
                               setup=_torch("broken_net", SYNTAX_ERROR)),
    "torch_weights_a_list": Case(culprit="holds a list, not a state_dict",
                                 setup=_weights("list")),
    "torch_weights_garbage": Case(culprit="is not a state_dict saved with torch.save",
                                  setup=_weights("garbage")),
    "metric_syntax_error": Case(["eval.metric._target_=broken_metric.score"],
                                "SyntaxError: invalid syntax (broken_metric.py:1)",
                                setup=_writes("broken_metric", SYNTAX_ERROR)),
    "stage_syntax_error": Case(["stages.quantize._target_=broken_stage.Stage"],
                               "SyntaxError: invalid syntax (broken_stage.py:1)",
                               setup=_writes("broken_stage", SYNTAX_ERROR)),
    "pass_syntax_error": Case(["optimize.passes=[{_target_: broken_pass.run}]"],
                              "SyntaxError: invalid syntax (broken_pass.py:1)",
                              setup=_writes("broken_pass", SYNTAX_ERROR)),
    "sklearn_clusterer": Case(culprit="KMeans, a clusterer", setup=_estimator("clusterer")),
    "sklearn_unfitted": Case(culprit="LogisticRegression that is not fitted",
                             setup=_estimator("unfitted")),
    # profiles that would hang or overflow the composition
    "profile_derives_from_itself": Case(culprit="cycle (bad -> bad)", setup=lambda t: (
        profile_file(t, lambda s: "defaults: [bad, _self_]\n" + s))),
    "profile_alias_bomb": Case(culprit="aliases expand", setup=lambda t: profile_file(t, _bomb)),
    "profile_too_large": Case(culprit="a config file is at most", setup=lambda t: profile_file(
        t, lambda s: s + "\n# " + "x" * (1 << 21) + "\n")),
    # sizes checked before anything is allocated
    "input_too_large": Case(["model.input_shape=[1,3,60000,60000]"], "model.input_shape",
                            setup=model_file(_dynamic_model)),
    "zoo_input_too_large": Case(["model=resnet18", "model.params.image_size=60000"],
                                "model.params.image_size"),
    # a search objective no stage produces, before any run
    "objective_misspelled": Case(["run.objective=latncy_ms"], "did you mean latency_ms"),
    # calibration and evaluation data must not be the same images
    "folder_too_small": Case(culprit="4 sample(s) cannot give data.calibration_size=4",
                             setup=_small_folder),
    # overrides Hydra itself refuses
    "unknown_key": Case(["no_such_key.x=1"], "no_such_key"),
    "wrong_type": Case(["simulate.frames=many"], "simulate.frames"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_nothing_half_written(name, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))  # the cases' own modules
    case = CASES[name]
    extra = case.setup(tmp_path) if case.setup else []
    base = [f"hydra.run.dir={tmp_path / 'run'}", f"run.cache_dir={tmp_path / 'cache'}",
            "model=onnx", f"model.path={tiny_model(tmp_path / 'tiny.onnx')}"]
    code, lines, _ = npuflow(*base, *case.args, *extra)
    assert code == 2, "\n".join(lines)
    assert len(lines) == 1, "\n".join(lines)
    assert lines[0].startswith("npuflow: error: ") and case.culprit in lines[0], lines[0]
    stages = [p.name for p in (tmp_path / "run").glob("*") if not p.name.startswith(".hydra")]
    assert not [s for s in stages if s != "npuflow.log"], stages
    # a lock file (empty, the sweep jobs' coordination) may stay; no entry, no temp copy
    entries = [p for p in (tmp_path / "cache").glob("stages/*/*") if p.suffix != ".lock"]
    assert not entries, entries


def test_absurd_sizes_are_warned_about_by_key_and_still_run(tmp_path):
    args = profile_file(tmp_path, lambda s: s.replace("size_kb: 1024", "size_kb: 0.001")
                        .replace("rows: 32", "rows: 100000"))
    code, lines, out = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                               "model=onnx", f"model.path={tiny_model(tmp_path / 't.onnx')}",
                               "data.calibration_size=2", "data.eval_size=2", *args)
    assert code == 0, "\n".join(lines)
    log = (tmp_path / "run" / "npuflow.log").read_text()
    assert "hardware.sram.size_kb = 0.001 is outside the plausible range" in log
    assert "hardware.mac_array.rows = 100000 is outside the plausible range" in log
    assert "hardware/bad.yaml: hardware.sram.size_kb = 0.001" in out  # on the console too


def test_explicit_empty_ops_means_everything_on_the_cpu(tmp_path):
    args = profile_file(tmp_path, lambda s: s[:s.index("\nops:")] + "\nops: {}"
                        + s[s.index("\nhost:"):])
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=onnx", f"model.path={tiny_model(tmp_path / 't.onnx')}",
                             "data.calibration_size=2", "data.eval_size=2", *args)
    assert code == 0, "\n".join(lines)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["npu_ops"] == 0 and metrics["cpu_ops"] >= 1


@pytest.mark.parametrize("damage", ["truncate_model", "garble_metrics", "delete_file"])
def test_a_corrupted_cache_entry_is_recomputed_with_a_warning(tmp_path, damage):
    model = tiny_model(tmp_path / "t.onnx")
    args = ["model=onnx", f"model.path={model}", f"run.cache_dir={tmp_path / 'cache'}",
            "data.calibration_size=2", "data.eval_size=2"]
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'clean'}", *args)
    assert code == 0, lines
    stages = tmp_path / "cache" / "stages"
    if damage == "truncate_model":
        target = next(stages.glob("export/*/model.onnx"))
        target.write_bytes(target.read_bytes()[:100])
    elif damage == "garble_metrics":
        next(stages.glob("quantize/*/metrics.json")).write_text("{not json")
    else:
        next(p for p in stages.glob("compile/*/*") if p.name != "COMPLETE").unlink()
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'again'}", *args)
    assert code == 0, lines
    log = (tmp_path / "again" / "npuflow.log").read_text()
    assert "does not match its digest (corrupted); removed, recomputing" in log
    clean = (tmp_path / "clean" / "metrics.json").read_bytes()
    assert (tmp_path / "again" / "metrics.json").read_bytes() == clean
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'third'}", *args)  # entry rebuilt
    assert json.loads((tmp_path / "third" / "cache.json").read_text()) == {
        s: "hit" for s in ("export", "optimize", "quantize", "compile", "simulate")}


def test_a_valid_per_kernel_tile_override_passes_the_door_and_is_used(tmp_path):
    model = tiny_model(tmp_path / "t.onnx")
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=onnx", f"model.path={model}", "compile.tiling.mode=fixed",
                             "+compile.tiling.overrides.conv_0.tile_m=8",
                             "+compile.tiling.overrides.conv_0.order=kmn")
    assert code == 0, lines
    plan = json.loads((tmp_path / "run" / "compile" / "plan.json").read_text())
    tiling = next(k["tiling"] for k in plan["kernels"] if k.get("tiling"))
    assert tiling["tm"] == 8 and tiling["order"] == "kmn"


def test_a_file_size_limit_is_one_line_and_leaves_no_cache_copy(tmp_path):
    """ulimit -f under the run folder and the cache (EFBIG, as ENOSPC on a full disk)."""
    import resource
    import subprocess
    import sys

    from tests.conftest import REPO

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "model=resnet18", f"hydra.run.dir={tmp_path / 'r'}",
         f"run.cache_dir={tmp_path / 'cache'}"], cwd=REPO, preexec_fn=limit,
        env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"},
        capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("npuflow: error: stage export") and "File too large" in lines[0]
    assert not [p for p in (tmp_path / "cache").glob("stages/*/*") if p.suffix != ".lock"]
    # no stage wrote anything: the folder is given back for the run after the fix
    assert list((tmp_path / "r").iterdir()) == []


def test_a_bad_value_under_dvc_names_params_yaml(tmp_path, monkeypatch):
    from pipeline import dvc_stage

    text = (CONF.parent / "params.yaml").read_text().replace("frames: 4", "frames: 0", 1)
    (tmp_path / "params.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    code, lines, _ = npuflow("export", main=lambda: dvc_stage.main(["export"]))
    assert code == 2 and lines == ["npuflow: error: params.yaml: simulate.frames: must be "
                                   ">= 1, got 0"], lines


def test_a_model_newer_than_onnxruntime_quantizes_is_converted_and_said(tmp_path):
    model = onnx.load(tiny_model(tmp_path / "t.onnx"))
    model.opset_import[0].version = 28
    model.ir_version = 13
    onnx.save(model, tmp_path / "opset28.onnx")
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=onnx", f"model.path={tmp_path / 'opset28.onnx'}",
                             "data.calibration_size=2", "data.eval_size=2")
    assert code == 0, lines
    log = (tmp_path / "run" / "npuflow.log").read_text()
    assert "the model's opset 28 is newer than onnxruntime" in log
    quantized = onnx.load(tmp_path / "run" / "quantize" / "model.onnx")
    assert quantized.opset_import[0].version < 28
    assert any(n.op_type == "QuantizeLinear" for n in quantized.graph.node)


def test_one_class_of_labels_is_warned_about(tmp_path):
    from PIL import Image

    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    for i in range(4):
        Image.fromarray(np.full((8, 8, 3), 50 * i, np.uint8)).save(
            tmp_path / "imgs" / "cat" / f"{i}.png")
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=onnx", f"model.path={tiny_model(tmp_path / 't.onnx')}",
                             "data=image_folder", f"data.path={tmp_path / 'imgs'}",
                             "data.calibration_size=2", "stages.order=[export,quantize]",
                             "eval.metric._target_=tests.custom_metrics.balanced_accuracy",
                             "~eval.metric.k", "eval.objective=balanced_accuracy")
    assert code == 0, lines
    log = (tmp_path / "run" / "npuflow.log").read_text()
    assert "every evaluation sample is of one class ('cat')" in log


def test_a_misspelled_objective_stops_a_sweep_before_its_first_job(tmp_path):
    code, lines, _ = npuflow("-m", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                             "run.objective=[latency_ms,energy]", "simulate.frames=2,3")
    assert code == 2 and "run.objective: 'energy'" in lines[-1], lines
    assert "did you mean energy_mj" in lines[-1]
    assert not (tmp_path / "sweep").exists()
