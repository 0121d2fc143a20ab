"""Export of users' ONNX files: opset upgrade, static shapes, clear refusals."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tests.conftest import error_lines, run_cli


def _export(tmp_path, *overrides):
    return run_cli(*overrides, "stages.order=[export]", f"hydra.run.dir={tmp_path}")


def _dynamic_copy(light_model, tmp_path):
    model = onnx.load(light_model("squeezenet"))
    inits = {i.name for i in model.graph.initializer}
    x = next(i for i in model.graph.input if i.name not in inits)
    x.type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, path)
    return path


def test_onnx_test_data_model_exports_upgraded_and_checked(tmp_path, light_model):
    proc = _export(tmp_path, "model=onnx", f"model.path={light_model('resnet50')}")
    assert proc.returncode == 0, proc.stderr
    info = json.loads((tmp_path / "export" / "model.json").read_text())
    assert info["opset"] == 17 and info["nodes"] > 400
    assert abs(info["macs"] - 4.089e9) / 4.089e9 < 0.01  # same net as torchvision's
    model = onnx.load(tmp_path / "export" / "model.onnx")
    onnx.checker.check_model(model, full_check=True)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["model_output_sha256"] == info["reference_run"]["output_sha256"]


def test_dynamic_input_is_refused_without_input_shape(tmp_path, light_model):
    path = _dynamic_copy(light_model, tmp_path)
    proc = _export(tmp_path / "run", "model=onnx", f"model.path={path}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "dynamic axis 0 ('batch')" in line and "model.input_shape" in line
    assert not (tmp_path / "run" / "export").exists()


def test_dynamic_input_is_fixed_by_input_shape(tmp_path, light_model):
    path = _dynamic_copy(light_model, tmp_path)
    proc = _export(tmp_path / "run", "model=onnx", f"model.path={path}",
                   "model.input_shape=[1,3,224,224]")
    assert proc.returncode == 0, proc.stderr
    info = json.loads((tmp_path / "run" / "export" / "model.json").read_text())
    assert info["inputs"][0]["shape"] == [1, 3, 224, 224]
    assert info["tensors_without_static_shape"] == 0


def test_wrong_rank_input_shape_names_the_input(tmp_path, light_model):
    proc = _export(tmp_path, "model=onnx", f"model.path={light_model('squeezenet')}",
                   "model.input_shape=[1,3,224]")
    assert proc.returncode == 2
    assert "input 'data_0' has rank 4" in error_lines(proc)[0]


def test_missing_and_non_onnx_files(tmp_path):
    proc = _export(tmp_path / "r1", "model=onnx", f"model.path={tmp_path / 'nope.onnx'}")
    assert proc.returncode == 2 and "no such file" in error_lines(proc)[0]
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00not a protobuf\xff" * 10)
    proc = _export(tmp_path / "r2", "model=onnx", f"model.path={junk}")
    assert proc.returncode == 2
    assert error_lines(proc) == [f"npuflow: error: model.path: '{junk}' is not an ONNX model "
                                 "(DecodeError)"]
    proc = _export(tmp_path / "r3", "model=onnx")
    assert proc.returncode == 2 and "model.path" in error_lines(proc)[0]


def test_truncated_onnx_file_is_one_line_and_leaves_no_export(tmp_path, light_model):
    whole = light_model("squeezenet").read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(whole[: len(whole) // 2])
    proc = _export(tmp_path / "run", "model=onnx", f"model.path={cut}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert str(cut) in line and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "export").exists()


def test_op_onnxruntime_cannot_run_is_named(tmp_path):
    node = helper.make_node("FancyOp", ["x"], ["y"], name="fancy_1", domain="vendor.npu")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [1, 4])],
                              [helper.make_tensor_value_info("y", 1, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("vendor.npu", 1)])
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    proc = _export(tmp_path / "run", "model=onnx", f"model.path={path}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "FancyOp" in line and "fancy_1" in line and "Traceback" not in proc.stderr


def test_a_wrong_symbolic_output_declaration_is_replaced_by_the_real_shape(tmp_path):
    """ddddocr's OCR model declares its output [1, seqlen] and returns rank 3: onnxruntime
    only warns, the strict checker refuses. Pinning the input must still export it."""
    shape = numpy_helper.from_array(np.array([0, 2, 2], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape_1")], "g",
        [helper.make_tensor_value_info("x", 1, ["batch", 4])],
        [helper.make_tensor_value_info("y", 1, ["batch", "seq"])], [shape])
    path = tmp_path / "liar.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    proc = _export(tmp_path / "run", "model=onnx", f"model.path={path}",
                   "model.input_shape=[1,4]")
    assert proc.returncode == 0, proc.stderr
    model = json.loads((tmp_path / "run" / "export" / "model.json").read_text())
    assert model["outputs"][0]["shape"] == [1, 2, 2]
