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
    kept = acc["float_layers"]
    assert len(kept) == 2 and acc["quant_float_layers"] == 1  # the first layer: Gemm + Relu
    plan = json.loads((tmp_path / "compile" / "plan.json").read_text())
    precision = {k["name"]: k["precision"] for k in plan["kernels"]}
    assert [precision[n] for n in kept if n in precision] == ["fp16"]  # one fused kernel
    assert "int8" in precision.values()


def test_auto_mixed_precision_meets_a_cosine_target_with_the_fewest_layers(tmp_path):
    acc = _quantize(tmp_path, "quant=int8", "quant.auto.enabled=true",
                    "quant.auto.target.min_output_cosine=0.99999")
    curve = json.loads((tmp_path / "quantize" / "auto_curve.json").read_text())
    assert curve[0]["float_layers"] == 0 and curve[0]["output_cosine"] < 0.99999
    assert acc["auto"]["stop"] == f"target met with {len(acc['auto']['float_layers'])} float layers"
    assert acc["output_cosine"] >= 0.99999 > curve[0]["output_cosine"]
    # pruning: no float layer can be re-quantized without missing the target
    final = set(acc["auto"]["float_layers"])
    assert all(not p["kept"] for p in curve if p["action"] == "requantize"
               and p["candidate"] in final)
    assert (tmp_path / "quantize" / "auto_curve.png").read_bytes()[:4] == b"\x89PNG"


def _npy_folder(tmp_path, arrays):
    folder = tmp_path / "npy"
    folder.mkdir()
    for i, a in enumerate(arrays):
        np.save(folder / f"s{i}.npy", a)
    return folder


@pytest.mark.parametrize(("arrays", "message"), [
    ([np.zeros((1, 32), np.float32)] * 2, "does not match the model input [1, 64]"),
    ([], "no samples found"),
    ([np.zeros((1, 64), np.float32)], "1 sample(s) cannot give data.calibration_size=1"),
    ([np.full((1, 64), np.nan, np.float32)] * 2, "contains NaN or infinite values"),
])
def test_bad_calibration_data_stops_with_one_line(tmp_path, arrays, message):
    """Contents are checked as the quantize stage reads them (upstream is cached by then);
    how many samples there are is checked at the door, before any stage."""
    folder = _npy_folder(tmp_path, arrays)
    cache = tmp_path / "cache"
    proc = run_cli("model=digits_mlp", "data=synthetic", "data.kind=npy",
                   f"data.path={folder}", "data.calibration_size=1", "quant=int8", CHAIN,
                   f"hydra.run.dir={tmp_path / 'r'}", f"run.cache_dir={cache}")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert message in line
    assert not (tmp_path / "r" / "quantize").exists()
    at_door = len(arrays) < 2
    assert bool(list((cache / "stages" / "optimize").glob("*/COMPLETE"))) != at_door
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
    assert "quant=as_is" in line and not (tmp_path / "a" / "quantize").exists()
    for name, choice in (("b", ()), ("c", ("quant=none",))):  # auto, or none: as shipped
        proc = run_cli(*common, *choice, f"hydra.run.dir={tmp_path / name}")
        assert proc.returncode == 0, proc.stderr
        metrics = json.loads((tmp_path / name / "metrics.json").read_text())
        assert "fc_1" in " ".join(metrics["fallback_ops"])  # MatMulInteger: no NPU spec
        accuracy = json.loads((tmp_path / name / "quantize" / "accuracy.json").read_text())
        assert accuracy["scheme"] == "as_is"


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


@pytest.mark.parametrize("method", ["minmax", "entropy"])
def test_parallel_calibration_gives_the_sequential_ranges_in_a_stable_file(tmp_path, method):
    """The calibrator's runs are computed two at a time (PrefetchedSession); its ranges
    must be those of onnxruntime's own sequential loop, and the cache file sorted."""
    import onnxruntime as ort
    from omegaconf import OmegaConf
    from onnxruntime.quantization import create_calibrator

    from pipeline import onnx_io
    from pipeline.quantization import schemes
    from pipeline.zoo import ZOO

    path = tmp_path / "m.onnx"
    onnx.save(ZOO["mobilenet_v2"](seed=0, opset=17, image_size=32), path)
    rng = np.random.default_rng(0)
    feeds = [{"input": rng.random((1, 3, 32, 32)).astype(np.float32)} for _ in range(6)]
    cfg = OmegaConf.create({"activation_symmetric": False, "calibration": {
        "method": method, "num_bins": 256, "num_quantized_bins": 128, "percentile": 99.9}})
    schemes.calibrate(path, feeds, cfg, tmp_path / "cache.json")
    options = {"symmetric": False}
    if method == "entropy":
        options.update(num_bins=256, num_quantized_bins=128)
    calibrator = create_calibrator(path, None, str(tmp_path / "aug.onnx"),
                                   calibrate_method=schemes.METHODS[method],
                                   extra_options=options)
    calibrator.infer_session = ort.InferenceSession(
        calibrator.augmented_model_path, onnx_io.session_options(optimized=False),
        providers=["CPUExecutionProvider"])
    calibrator.collect_data(schemes.ListReader(feeds))
    sequential = calibrator.compute_data()
    cached = json.loads((tmp_path / "cache.json").read_text())["data"]
    assert list(cached) == sorted(cached) == sorted(sequential.data)
    def values(x) -> list:
        return np.ravel(x["data"] if isinstance(x, dict) else x).tolist()

    for name, data in sequential.data.items():
        assert values(cached[name]["lowest"]) == np.ravel(data.range_value[0]).tolist()
        assert values(cached[name]["highest"]) == np.ravel(data.range_value[1]).tolist()


def test_layer_errors_without_the_weight_saves_are_the_librarys(tmp_path):
    """The QDQ model's augmented copy no longer copies out its dequantized weights; every
    activation's error must be what the library's full augmentation gives."""
    from onnxruntime.quantization import qdq_loss_debug as qdq

    from pipeline import onnx_io
    from pipeline.quantization import accuracy
    from pipeline.quantization.schemes import ListReader

    run_dir = tmp_path / "run"
    proc = run_cli("model=resnet18", "data.calibration_size=4", "data.eval_size=4", CHAIN,
                   f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr
    float_path, qdq_path = run_dir / "optimize" / "model.onnx", run_dir / "quantize" / "model.onnx"
    rng = np.random.default_rng(1)
    feeds = [{"input": rng.random((1, 3, 224, 224)).astype(np.float32)} for _ in range(2)]
    errors, float_acts = accuracy.layer_errors(float_path, qdq_path, feeds)
    full = tmp_path / "full.onnx"
    qdq.modify_model_output_intermediate_tensors(str(qdq_path), str(full))
    q_acts = qdq.collect_activations(str(full), ListReader(feeds), onnx_io.session_options())
    matched = qdq.create_activation_matching(q_acts, float_acts)
    expected = {n: accuracy._tensor_errors(m) for n, m in matched.items()
                if "float" in m and "post_qdq" in m}
    assert errors == expected and len(errors) > 20
    assert len([n for n in q_acts if n.endswith("_DequantizeLinear_Output")]) > len(errors)
