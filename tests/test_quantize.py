"""Quantize: real calibration in onnxruntime, mixed precision, per-layer analysis, bad data."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from tests.conftest import error_lines, run_cli

CHAIN = "stages.order=[export,optimize,quantize]"


def _quantize(tmp_path, *overrides):
    proc = run_cli("model=digits_mlp", "data=digits", *overrides, CHAIN,
                   f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp_path / "quantize" / "accuracy.json").read_text())


@pytest.mark.parametrize("overrides", [
    ("quant=none",), ("quant=fp16",), ("quant=int8",),
    ("quant=int8", "quant.calibration.method=entropy"),
    ("quant=int8", "quant.calibration.method=percentile", "quant.per_channel=false"),
])
def test_digits_accuracy_comes_from_onnxruntime_on_the_held_out_split(tmp_path, overrides):
    acc = _quantize(tmp_path, *overrides)
    assert acc["eval_samples"] == 450 and acc["calibration_samples"] == 200
    assert acc["accuracy_top1_float"] > 0.95
    assert abs(acc["accuracy_top1"] - acc["accuracy_top1_float"]) <= 0.02
    model = onnx.load(tmp_path / "quantize" / "model.onnx")
    ops = {n.op_type for n in model.graph.node}
    assert ("QuantizeLinear" in ops) == (acc["scheme"] == "int8")
    if acc["scheme"] == "fp16":
        assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in model.graph.initializer)


def test_entropy_is_not_silently_minmax(tmp_path):
    _quantize(tmp_path / "mm", "quant=int8")
    _quantize(tmp_path / "kl", "quant=int8", "quant.calibration.method=entropy")
    mm = json.loads((tmp_path / "mm" / "quantize" / "calibration.json").read_text())
    kl = json.loads((tmp_path / "kl" / "quantize" / "calibration.json").read_text())
    assert mm != kl  # KL with 2048 bins clips ranges that min/max keeps


def test_keep_float_layers_stay_float_and_compile_runs_them_at_fp16(tmp_path):
    proc = run_cli("model=digits_mlp", "data=digits", "quant=int8",
                   "quant.keep_first_n=1", "stages.order=[export,optimize,quantize,compile]",
                   f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    acc = json.loads((tmp_path / "quantize" / "accuracy.json").read_text())
    (kept,) = acc["float_layers"]
    plan = json.loads((tmp_path / "compile" / "plan.json").read_text())
    precision = {k["name"]: k["precision"] for k in plan["kernels"]}
    assert precision[kept] == "fp16"
    assert "int8" in precision.values()


def test_auto_mixed_precision_keeps_the_fewest_sensitive_layers(tmp_path):
    acc = _quantize(tmp_path, "quant=int8", "quant.auto.enabled=true",
                    "quant.auto.target.min_output_cosine=0.9999999", "quant.analysis.isolated=true")
    curve = acc["auto_curve"]
    assert curve[0]["float_layers"] == 0
    assert [c["float_layers"] for c in curve] == list(range(len(curve)))
    assert len(acc["float_layers"]) == curve[-1]["float_layers"]
    assert curve[-1]["output_cosine"] >= curve[0]["output_cosine"]
    assert (tmp_path / "quantize" / "auto_curve.png").read_bytes()[:4] == b"\x89PNG"
    rows = (tmp_path / "quantize" / "layers.csv").read_text().splitlines()
    assert rows[0].startswith("layer,op,tensor,cosine,max_abs_error,sqnr_db")
    assert len(rows) >= 2  # the layers still quantized, compared with fp32


def _npy_folder(tmp_path, arrays):
    folder = tmp_path / "npy"
    folder.mkdir()
    for i, a in enumerate(arrays):
        np.save(folder / f"s{i}.npy", a)
    return folder


@pytest.mark.parametrize(("arrays", "message"), [
    ([np.zeros((1, 32), np.float32)], "does not match the model input [1, 64]"),
    ([], "no samples found"),
    ([np.full((1, 64), np.nan, np.float32)], "contains NaN or infinite values"),
])
def test_bad_calibration_data_stops_with_one_line(tmp_path, arrays, message):
    folder = _npy_folder(tmp_path, arrays)
    cache = tmp_path / "cache"
    proc = run_cli("model=digits_mlp", "data=synthetic", "data.kind=npy",
                   f"data.path={folder}", "quant=int8", CHAIN, f"hydra.run.dir={tmp_path / 'r'}",
                   f"run.cache_dir={cache}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert message in line
    assert not (tmp_path / "r" / "quantize").exists()
    assert list((cache / "stages" / "optimize").glob("*/COMPLETE"))  # upstream was cached
    assert not list((cache / "stages" / "quantize").glob("*/COMPLETE"))
    assert not list(cache.rglob("*.tmp-*"))


def test_image_folder_is_preprocessed_once_for_calibration_and_eval(tmp_path):
    from PIL import Image
    from sklearn.datasets import load_sample_images

    folder = tmp_path / "imgs"
    folder.mkdir()
    for i, img in enumerate(load_sample_images().images):
        Image.fromarray(img).save(folder / f"img{i}.png")
    shutil.copy(folder / "img0.png", folder / "img2.png")
    proc = run_cli("model=mobilenet_v2", "data=synthetic", "data.kind=images",
                   f"data.path={folder}", "data.calibration_size=2", "data.eval_size=2",
                   "quant=int8", "quant.analysis.layers=false", CHAIN,
                   f"hydra.run.dir={tmp_path / 'r'}")
    assert proc.returncode == 0, proc.stderr
    acc = json.loads((tmp_path / "r" / "quantize" / "accuracy.json").read_text())
    assert acc["calibration_samples"] == 2 and acc["eval_samples"] == 1
    assert acc["output_cosine"] > 0.99


def test_a_model_quantized_before_npuflow_is_not_quantized_twice(tmp_path):
    from onnx import helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc_1")], "fc",
        [helper.make_tensor_value_info("x", 1, [1, 64])],
        [helper.make_tensor_value_info("y", 1, [1, 32])], [w])
    float_path, int8_path = tmp_path / "fc.onnx", tmp_path / "fc_int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              float_path)
    quantize_dynamic(str(float_path), str(int8_path), weight_type=QuantType.QInt8)
    common = ("model=onnx", f"model.path={int8_path}", "model.input_shape=null")
    proc = run_cli(*common, "quant=int8", CHAIN, f"hydra.run.dir={tmp_path / 'a'}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "the model is already quantized (DynamicQuantizeLinear, MatMulInteger)" in line
    assert "quant=none" in line and not (tmp_path / "a" / "quantize").exists()
    proc = run_cli(*common, "quant=none", f"hydra.run.dir={tmp_path / 'b'}")
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert "fc_1" in " ".join(metrics["fallback_ops"])  # MatMulInteger: no NPU spec


def test_fp16_conversion_of_an_optimized_graph_with_resize_runs_in_onnxruntime():
    """onnxslim (the default optimize pass) leaves value_info behind; with it,
    onnxconverter-common produced a model onnxruntime refused (yolov5s: the Cast after
    the fp32 Resize of a top-down path)."""
    import onnxruntime as ort

    from pipeline.optimizer.library_passes import onnxslim_pass
    from pipeline.quantization.schemes import to_fp16
    from pipeline.zoo.builder import GraphBuilder

    g = GraphBuilder("top_down", seed=0)
    a = g.conv(g.input("x", (1, 3, 8, 8)), 4, 3, 1)
    up = g.resize_nearest(g.conv(a, 4, 3, 2), 2)
    g.output(g.conv(g.concat([up, a]), 4, 3, 1))
    model = onnxslim_pass(g.build())
    half = to_fp16(model)
    sess = ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"x": np.random.default_rng(0).random((1, 3, 8, 8)).astype(np.float32)}
    got, want = sess.run(None, feed)[0], ref.run(None, feed)[0]
    assert got.dtype == np.float32 and got.shape == (1, 4, 8, 8)
    assert np.max(np.abs(got - want)) < 1e-2 * np.max(np.abs(want))
