"""Your model as you ship it: TFLite files and pre-quantized ONNX through all five stages
with their own quantization, checked against the runtime that defines their integers.

The TFLite files are MLPerf Tiny's trained ResNet-8 and ad01 and the seeded networks of
``benchmarks/models`` (committed); the bad files are edits of them written with LiteRT's
own flatbuffer schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import flatbuffers
import numpy as np
import onnx
import pytest
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from onnx import TensorProto, helper, numpy_helper

from pipeline.exporters import tflite_onnx, tflite_reader
from pipeline.quantization import qoperator, schemes
from tests.conftest import REPO
from tests.conftest import run_inprocess as npuflow

MODELS = REPO / "benchmarks" / "models"
RESNET8 = MODELS / "mlperf_tiny" / "pretrainedResnet_quant.tflite"
RESNET8_FLOAT = MODELS / "mlperf_tiny" / "pretrainedResnet.tflite"
FILES = ["mlperf_tiny/pretrainedResnet_quant.tflite", "mlperf_tiny/ad01_int8.tflite",
         "mlperf_tiny/kws_ds_cnn_int8.tflite", "mlperf_tiny/vww_mobilenet_v1_025_int8.tflite",
         "keras_seeded/mobilenet_v3s_075_96_int8.tflite", "keras_seeded/unet_64_int8.tflite",
         "keras_seeded/cifar_cnn_int8.tflite", "mlperf_tiny/pretrainedResnet.tflite",
         "mlperf_tiny/kws_ds_cnn_fp32.tflite"]
SMALL = ("data.calibration_size=4", "data.eval_size=4", "simulate.plots=false")


def _every_tensor(path: Path, onnx_model: onnx.ModelProto, x: np.ndarray,
                  resolver: OpResolverType = OpResolverType.AUTO) -> list[tuple[str, float]]:
    """(tensor, largest difference in the file's quantization steps) for every tensor an
    op writes: LiteRT's value against the ONNX view's in onnxruntime, on input ``x``."""
    import onnxruntime as ort

    model = tflite_reader.read(path)
    graph = onnx.ModelProto()
    graph.CopyFrom(onnx_model)
    written = [model.tensor(op.outputs[0]) for op in model.ops]
    produced = {o for n in graph.graph.node for o in n.output}
    for t in written:
        if t.name in produced:
            graph.graph.output.append(helper.make_tensor_value_info(t.name, TensorProto.FLOAT,
                                                                    None))
    sess = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    values = dict(zip([o.name for o in sess.get_outputs()],
                      sess.run(None, {sess.get_inputs()[0].name: x}), strict=True))
    interpreter = Interpreter(model_path=str(path), num_threads=1,
                              experimental_op_resolver_type=resolver,
                              experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    feed = x.transpose(0, 2, 3, 1) if x.ndim == 4 else x
    scale, zero = detail["quantization"]
    if scale:
        info = np.iinfo(detail["dtype"])
        feed = np.clip(np.round(feed / scale) + zero, info.min, info.max)
    interpreter.set_tensor(detail["index"], feed.astype(detail["dtype"]))
    interpreter.invoke()
    out = []
    for t in written:
        if t.name not in values:
            continue
        theirs = interpreter.get_tensor(t.index).astype(np.float64)
        step = 1.0
        if t.quant is not None:
            theirs = (theirs - t.quant.zero_point[0]) * t.quant.scale[0]
            step = float(t.quant.scale[0])
        if theirs.ndim == 4:
            theirs = theirs.transpose(0, 3, 1, 2)
        ours = values[t.name].astype(np.float64)
        out.append((t.name, float(np.max(np.abs(ours - theirs))) / step))
    return out


@pytest.mark.parametrize("name", FILES)
def test_the_onnx_view_gives_litert_s_outputs(name):
    """Each graph output within one quantization step of LiteRT's (a float output within
    1e-4 of its scale); on the MLPerf Tiny files every tensor an op writes as well. The
    seeded MobileNetV3's HARD_SWISH has a fixed-point int8 kernel whose rounding moves a
    few of its tensors by up to 5 steps before its softmax output agrees again."""
    path = MODELS / name
    tfl = tflite_reader.read(path)
    model = tflite_onnx.convert(tfl)
    onnx.checker.check_model(model, full_check=True)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).random(shape).astype(np.float32)
    diffs = dict(_every_tensor(path, model, x))
    assert len(diffs) >= 5
    limit = 1.0 + 1e-4 if tfl.tensor(tfl.outputs[0]).quant else 1e-4
    outputs = [tfl.tensor(i).name for i in tfl.outputs]
    assert max(diffs[o] for o in outputs) <= limit
    if name.startswith("mlperf_tiny"):
        assert max(diffs.values()) <= limit, sorted(diffs.items(), key=lambda d: -d[1])[:3]


def test_litert_s_reference_kernels_round_twice():
    """Why npuflow measures a TFLite file with LiteRT's default kernels: the reference ones
    (TFLite Micro's arithmetic) differ from them by a step per layer, compounding."""
    model = tflite_onnx.convert(tflite_reader.read(RESNET8))
    x = np.random.default_rng(0).random((1, 3, 32, 32)).astype(np.float32)
    reference = dict(_every_tensor(RESNET8, model, x, OpResolverType.BUILTIN_REF))
    default = dict(_every_tensor(RESNET8, model, x))
    assert max(default.values()) < 1e-3  # float32 rounding of the real values only
    assert max(reference.values()) >= 5  # 11 steps at the int8 softmax


def test_the_files_scales_zero_points_and_integers_are_kept():
    model = tflite_reader.read(RESNET8)
    converted = tflite_onnx.convert(model)
    inits = {i.name: numpy_helper.to_array(i) for i in converted.graph.initializer}
    weights = [t for t in model.tensors if t.is_constant and t.quant and t.data.ndim == 4]
    assert weights
    for t in weights:
        assert np.array_equal(inits[f"{t.name}:scale"], t.quant.scale)  # per channel
        stored = inits[t.name]
        assert stored.dtype == np.int8 and np.array_equal(np.sort(stored.ravel()),
                                                          np.sort(t.data.ravel()))
    for t in (t for t in model.tensors if not t.is_constant and t.quant):
        assert inits[f"{t.name}:scale"] == t.quant.scale[0]
        assert inits[f"{t.name}:zero_point"] == t.quant.zero_point[0]
    nodes = {n.name: n for n in converted.graph.node}
    first = model.tensor(model.ops[0].outputs[0]).name
    assert nodes[first].op_type == "Conv"  # named after the tensor Netron shows
    meta = {p.key: p.value for p in converted.metadata_props}
    assert meta["npuflow.io_layout"] == "NHWC"


def test_a_tflite_file_runs_all_five_stages_with_its_own_integers(tmp_path):
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=tflite", f"model.path={RESNET8}",
                             f"model.float_path={RESNET8_FLOAT}", "hardware=ethos_u55_256",
                             *SMALL)
    assert code == 0, lines
    run = tmp_path / "run"
    accuracy = json.loads((run / "quantize" / "accuracy.json").read_text())
    assert accuracy["scheme"] == "as_is" and accuracy["runtime"] == "LiteRT"
    assert accuracy["layers_matched"] == 10 and accuracy["top1_agreement"] >= 0.75
    assert "quant=auto: the model is already quantized" in (run / "npuflow.log").read_text()
    plan = json.loads((run / "compile" / "plan.json").read_text())
    assert {(k["target"], k["precision"]) for k in plan["kernels"]} == {("npu", "int8")}
    assert not plan["transfers"] or all(t["layout_conversion"] is None
                                        for t in plan["transfers"])  # the file's NHWC io
    model = json.loads((run / "export" / "model.json").read_text())
    assert model["export"]["max_steps_vs_framework"] == 0.0
    assert (run / "export" / "model.tflite").read_bytes() == RESNET8.read_bytes()
    compiled = {i.name: numpy_helper.to_array(i) for i in
                onnx.load(run / "quantize" / "model.onnx").graph.initializer}
    for t in tflite_reader.read(RESNET8).tensors:
        if t.is_constant and t.dtype == np.int8:  # the file's weights, nothing requantized
            assert compiled[t.name].dtype == np.int8
            assert np.array_equal(np.sort(compiled[t.name].ravel()), np.sort(t.data.ravel()))


def test_quant_int8_on_a_quantized_file_says_how_to_keep_it(tmp_path):
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=tflite", f"model.path={RESNET8}", "quant=int8", *SMALL)
    assert code == 2 and "already quantized" in lines[0] and "quant=as_is" in lines[0]
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'f'}", "run.cache=false",
                             "model=tflite", f"model.path={RESNET8_FLOAT}", "quant=as_is",
                             *SMALL)
    assert code == 2 and "quant.scheme=as_is: the model is not quantized" in lines[0]


def _small_cnn(path: Path) -> Path:
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32) * 0.2,
                                 "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1] * 4),
             helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="gap")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 16, 16])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4, 1, 1])], [w1, w2, b2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _ort_quantized(tmp: Path, fmt: str) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(2)
            self.items = iter([{"x": rng.random((1, 3, 16, 16)).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self):
            return next(self.items, None)

    out = tmp / f"cnn_{fmt}.onnx"
    quantize_static(str(_small_cnn(tmp / "cnn.onnx")), str(out), Reader(),
                    quant_format=getattr(QuantFormat, fmt), per_channel=True)
    return out


def test_a_qoperator_model_becomes_qdq_with_the_same_integers(tmp_path):
    import onnxruntime as ort

    path = _ort_quantized(tmp_path, "QOperator")
    model = onnx.load(path)
    assert qoperator.has_qoperators(model)
    qdq = qoperator.to_qdq(model)
    assert not qoperator.has_qoperators(qdq)
    onnx.checker.check_model(qdq, full_check=True)
    x = np.random.default_rng(3).random((1, 3, 16, 16)).astype(np.float32)
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
           .run(None, {"x": x})[0] for m in (model, qdq)]
    scale = numpy_helper.to_array(next(i for i in model.graph.initializer
                                       if i.name.startswith("y") and "scale" in i.name))
    assert np.max(np.abs(run[0] - run[1])) <= float(scale) + 1e-7  # within one step
    ints = {i.name for i in model.graph.initializer if i.data_type == TensorProto.INT8}
    assert ints <= {i.name for i in qdq.graph.initializer}


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_a_pre_quantized_onnx_file_is_kept_as_is_by_default(tmp_path, fmt):
    path = _ort_quantized(tmp_path, fmt)
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=onnx", f"model.path={path}",
                             f"model.float_path={tmp_path / 'cnn.onnx'}", *SMALL)
    assert code == 0, lines
    accuracy = json.loads((tmp_path / "run" / "quantize" / "accuracy.json").read_text())
    assert accuracy["scheme"] == "as_is" and accuracy["runtime"] == "onnxruntime"
    assert accuracy["output_cosine"] > 0.95 and accuracy["layers_matched"] >= 1
    plan = json.loads((tmp_path / "run" / "compile" / "plan.json").read_text())
    convs = [k for k in plan["kernels"] if "Conv" in k["op_types"]]
    assert convs and {k["precision"] for k in convs} == {"int8"}


def test_a_dead_channel_is_not_stretched_into_noise(tmp_path, monkeypatch):
    """A pruned conv (24 of 32 output channels at ~1e-31): npuflow's int8 weights for them
    are 0 and compress away, as in TFLite's own int8 files; without the minimum range
    (onnxruntime's default) they are +-127 noise and the weight stream grows."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1
    w[8:] *= 1e-30
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "pruned",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "pruned.onnx")

    def run(name: str) -> tuple[np.ndarray, int]:
        code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / name}", "run.cache=false",
                                 "model=onnx", f"model.path={tmp_path / 'pruned.onnx'}",
                                 "hardware=ethos_u55_256", *SMALL)
        assert code == 0, lines
        q = onnx.load(tmp_path / name / "quantize" / "model.onnx")
        weights = next(numpy_helper.to_array(i) for i in q.graph.initializer
                       if i.data_type == TensorProto.INT8 and len(i.dims) == 4)
        metrics = json.loads((tmp_path / name / "metrics.json").read_text())
        return weights, metrics["weights_dram_bytes"]

    weights, stream = run("tflite_rule")
    assert not weights[8:].any() and weights[:8].all(axis=(1, 2, 3)).any()
    monkeypatch.setattr(schemes, "MINIMUM_REAL_RANGE", None)
    noise, noisy_stream = run("stretched")
    assert np.abs(noise[8:]).max() == 127 and noisy_stream > 2 * stream


def _int16x8_fc(path: Path) -> Path:
    """A fully connected layer in TFLite's int16x8 scheme (int16 activations, int8
    weights, int64 bias), written with LiteRT's schema: no converter here makes one."""
    def tensor(name, shape, kind, buffer, scale, axis=0):
        t = schema.TensorT()
        t.name, t.shape, t.type, t.buffer = name.encode(), np.array(shape, np.int32), kind, \
            buffer
        q = schema.QuantizationParametersT()
        q.scale, q.zeroPoint = np.array(scale, np.float32), np.zeros(len(scale), np.int64)
        q.quantizedDimension = axis
        t.quantization = q
        return t

    def buffer(data=None):
        b = schema.BufferT()
        if data is not None:
            b.data = np.frombuffer(data.tobytes(), np.uint8)
        return b

    rng = np.random.default_rng(0)
    sx, sw, sy = 0.001, 0.01, 0.02
    model = schema.ModelT()
    model.version = 3
    model.buffers = [buffer(), buffer(), buffer(rng.integers(-127, 128, (8, 16)).astype(np.int8)),
                     buffer(rng.integers(-1000, 1000, 8).astype(np.int64)), buffer()]
    graph = schema.SubGraphT()
    graph.tensors = [tensor("x", [1, 16], schema.TensorType.INT16, 1, [sx]),
                     tensor("w", [8, 16], schema.TensorType.INT8, 2, [sw] * 8),
                     tensor("b", [8], schema.TensorType.INT64, 3, [sx * sw] * 8),
                     tensor("y", [1, 8], schema.TensorType.INT16, 4, [sy])]
    graph.inputs, graph.outputs = np.array([0], np.int32), np.array([3], np.int32)
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.FULLY_CONNECTED
    code.version = 4
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, np.array([0, 1, 2], np.int32), \
        np.array([3], np.int32)
    op.builtinOptionsType = schema.BuiltinOptions.FullyConnectedOptions
    op.builtinOptions = schema.FullyConnectedOptionsT()
    model.operatorCodes, graph.operators, model.subgraphs = [code], [op], [graph]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(bytes(builder.Output()))
    return path


def test_an_int16x8_file_keeps_its_int16_activations(tmp_path):
    path = _int16x8_fc(tmp_path / "fc16.tflite")
    model = tflite_onnx.convert(tflite_reader.read(path))
    assert model.opset_import[0].version == 21  # int16 QuantizeLinear is standard from 21
    x = np.random.default_rng(1).uniform(-20, 20, (1, 16)).astype(np.float32)
    assert dict(_every_tensor(path, model, x))["y"] <= 1.0
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=tflite", f"model.path={path}", "hardware=ethos_u55_256",
                             *SMALL)
    assert code == 0, lines
    plan = json.loads((tmp_path / "run" / "compile" / "plan.json").read_text())
    assert [(k["op_types"], k["precision"]) for k in plan["kernels"]] == [(["Gemm"], "int16")]


# -- bad files: edits of a real one, written with LiteRT's schema ---------------------------


def _edited(tmp: Path, edit) -> Path:
    model = schema.ModelT.InitFromPackedBuf(RESNET8.read_bytes(), 0)
    edit(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path = tmp / "edited.tflite"
    path.write_bytes(bytes(builder.Output()))
    return path


def _unknown_op(model) -> None:
    code = model.operatorCodes[model.subgraphs[0].operators[0].opcodeIndex]
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.LSH_PROJECTION


def _custom_op(model) -> None:
    code = model.operatorCodes[model.subgraphs[0].operators[0].opcodeIndex]
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode = b"VendorConv"


def _dynamic(model) -> None:
    graph = model.subgraphs[0]
    graph.tensors[graph.inputs[0]].shapeSignature = np.array([1, -1, -1, 3], np.int32)


def _float16_weights(model) -> None:
    """A float16 weight dequantized at load, the way size-optimised float files store it."""
    graph = model.subgraphs[0]
    conv = graph.operators[0]
    weight = graph.tensors[conv.inputs[1]]
    half = schema.TensorT()
    half.name, half.type, half.shape = b"half_weights", schema.TensorType.FLOAT16, weight.shape
    buffer = schema.BufferT()
    buffer.data = np.zeros(int(np.prod(weight.shape)), np.float16).view(np.uint8)
    model.buffers.append(buffer)
    half.buffer = len(model.buffers) - 1
    graph.tensors.append(half)
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.DEQUANTIZE
    model.operatorCodes.append(code)
    op = schema.OperatorT()
    op.opcodeIndex = len(model.operatorCodes) - 1
    op.inputs, op.outputs = np.array([len(graph.tensors) - 1]), np.array([conv.inputs[1]])
    graph.operators.insert(0, op)


BAD_FILES = {
    "truncated": (lambda tmp: _cut(tmp), "is not a complete TFLite file"),
    "not_tflite": (lambda tmp: _not_tflite(tmp), "is not a TFLite file"),
    "unknown_op": (lambda tmp: _edited(tmp, _unknown_op), "is LSH_PROJECTION, a TFLite builtin"),
    "custom_op": (lambda tmp: _edited(tmp, _custom_op), "the custom op 'VendorConv'"),
    "dynamic": (lambda tmp: _edited(tmp, _dynamic), "has a dynamic shape [1, -1, -1, 3]"),
    "float16": (lambda tmp: _edited(tmp, _float16_weights), "'half_weights' holds float16"),
}


def _cut(tmp: Path) -> Path:
    path = tmp / "cut.tflite"
    path.write_bytes(RESNET8.read_bytes()[:4000])
    return path


def _not_tflite(tmp: Path) -> Path:
    path = tmp / "model.tflite"
    path.write_bytes(b"\x00" * 64)
    return path


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_tflite_file_is_one_line_naming_the_op_or_tensor(tmp_path, case):
    make, culprit = BAD_FILES[case]
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'run'}", "run.cache=false",
                             "model=tflite", f"model.path={make(tmp_path)}", *SMALL)
    assert code == 2 and len(lines) == 1, lines
    assert culprit in lines[0], lines[0]
    assert not (tmp_path / "run" / "export").exists()


def test_npuflow_s_own_int8_model_kept_as_is_gives_the_same_figures(tmp_path):
    """A QDQ file's own quantization, compiled as shipped, is costed exactly as the run
    that wrote it: the same plan, latency, energy and errors against the same float model."""
    args = ("model=resnet18", "model.params.image_size=64", *SMALL)
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'own'}", "run.cache=false", *args)
    assert code == 0, lines
    own = tmp_path / "own"
    code, lines, _ = npuflow(f"hydra.run.dir={tmp_path / 'kept'}", "run.cache=false",
                             "model=onnx", f"model.path={own / 'quantize' / 'model.onnx'}",
                             f"model.float_path={own / 'optimize' / 'model.onnx'}", *SMALL)
    assert code == 0, lines
    a, b = (json.loads((tmp_path / r / "metrics.json").read_text()) for r in ("own", "kept"))
    for key in ("latency_ms", "energy_mj", "kernels", "dram_bytes", "output_cosine",
                "min_layer_cosine", "top1_agreement"):
        assert a[key] == b[key], key


@pytest.mark.parametrize("name", ["mlperf_tiny/vww_mobilenet_v1_025_int8",
                                  "keras_seeded/unet_64_int8", "mlperf_tiny/ad01_int8"])
def test_an_int8_file_matches_litert_bit_for_bit_on_any_cpu(name):
    """onnxruntime's fused int8 kernels on AVX2 (no VNNI) add u8 x s8 product pairs in
    saturating 16-bit registers; LiteRT sums in 32 bits. Run as written (DequantizeLinear,
    float op, QuantizeLinear), npuflow's ONNX of each file equals LiteRT's outputs exactly
    whatever the CPU (fused: 1-3 steps apart on an AVX2 EPYC, and the file refused)."""
    from omegaconf import OmegaConf

    from pipeline.exporters import tflite_export

    cfg = OmegaConf.create({"path": str(MODELS / f"{name}.tflite"), "seed": 0})
    _, record = tflite_export.export(cfg)
    assert record["max_steps_vs_framework"] == 0.0
