"""Quantization schemes, all done by maintained tools: onnxruntime.quantization for int8 /
int16 (QDQ), onnxconverter-common for fp16.

Calibration is run here rather than inside ``quantize_static`` for one reason: with its
default options the entropy calibrator uses 128 histogram bins quantized into 128 bins,
which makes KL calibration return the min/max range (silently equal to ``minmax``). We
drive ``create_calibrator`` with ``calibration.num_bins`` (2048) and
``num_quantized_bins`` (128), save the ranges as onnxruntime's calibration cache
(``quantize/calibration.json``) and pass that cache back to ``quantize_static``, which then
skips its own calibration. The same cache serves the per-layer and sensitivity runs.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from omegaconf import DictConfig
from onnx import version_converter
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    create_calibrator,
    quantize_static,
)
from onnxruntime.quantization.calibrate import TensorsData, save_tensors_data

from ops.graph import QDQ_OPS
from ops.quant import WEIGHTED_OPS
from pipeline import onnx_io
from pipeline.errors import UserError
from pipeline.reports.terminal import task

log = logging.getLogger(__name__)
COMPUTE_OPS = WEIGHTED_OPS
# A range narrower than this is widened to it before its scale is computed, for weights
# (per channel) and activations alike: TFLite's converter does the same
# (tensorflow/compiler/mlir/lite/quantization/quantization_utils.cc, ExpandVerySmallRange,
# kNearZeroTolerance = 1e-6). Without it a dead channel of a trained network (weights of
# ~1e-31, 81% of MLPerf Tiny's VWW MobileNet) gets a scale of ~1e-33 and its weights
# become +-127 noise that no longer compresses; with it they quantize to 0, as in the
# reference int8 file. onnxruntime's MinimumRealRange widens [rmin, rmax] to
# [rmin, rmin + 1e-6] where TFLite widens it to [-5e-7, 5e-7]: such a channel's scale is
# twice TFLite's and its weights are 0 in both. RKNN-Toolkit2's quantizer is closed
# source; what it does with such channels was not measured.
MINIMUM_REAL_RANGE = 1e-6  # the ops a layer is anchored on (ops/quant.py)
QTYPES = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8, "int16": QuantType.QInt16,
          "uint16": QuantType.QUInt16}
METHODS = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
           "percentile": CalibrationMethod.Percentile}


class ListReader(CalibrationDataReader):
    """The narrow onnxruntime protocol: get_next() -> feed dict or None."""

    def __init__(self, feeds: Iterable[dict[str, np.ndarray]]) -> None:
        self._items = list(feeds)
        self._it = iter(self._items)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def __len__(self) -> int:
        return len(self._items)


# ops that only a model quantized before npuflow saw it contains
QUANTIZED_OPS = (*QDQ_OPS, "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
                 "ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM")


def quantized_ops(model: onnx.ModelProto) -> list[str]:
    """The op types that show a model was quantized before npuflow saw it."""
    return sorted({n.op_type for n in model.graph.node if n.op_type in QUANTIZED_OPS})


def resolve(model: onnx.ModelProto, scheme: str) -> str:
    """The scheme a run applies: ``auto`` is ``int8`` for a float model and ``as_is`` for a
    quantized one (said in one log line); quantizing a quantized model again, or keeping
    the quantization of a float one, is one line. ``none`` on a quantized model compiles it
    as shipped, as ``as_is`` does."""
    found = quantized_ops(model)
    if scheme == "auto":
        if found:
            log.info("quant=auto: the model is already quantized (%s); its own quantization "
                     "is kept (quant=as_is)", ", ".join(found))
        return "as_is" if found else "int8"
    if found and scheme in ("int8", "fp16", "weight_only"):
        raise UserError(f"quant.scheme={scheme}: the model is already quantized "
                        f"({', '.join(found)}); use quant=as_is to compile it as shipped (the "
                        "default, quant=auto, does), or give its float original to "
                        "quantize it anew")
    if scheme == "as_is" and not found:
        raise UserError("quant.scheme=as_is: the model is not quantized (no QuantizeLinear, "
                        "QLinear or integer op); quant=int8 or the default quant=auto "
                        "quantizes it")
    return "as_is" if found and scheme == "none" else scheme


@functools.cache
def _qdq_runs_at(opset: int) -> bool:
    """Whether this onnxruntime has QuantizeLinear / DequantizeLinear kernels at ``opset``
    (onnx defines opsets before onnxruntime implements them: onnx 1.23 knows opset 28,
    onnxruntime 1.32 quantizes up to 27)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [1.0]),
         helper.make_tensor("z", TensorProto.INT8, [], [0])])
    probe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime's NOT_IMPLEMENTED for an opset it does not know
        return False
    return True


def quantizable_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model at an opset onnxruntime can quantize: a model newer than that is converted
    down to the newest opset whose QDQ kernels exist (onnx's version converter; the
    quantize stage's own runs then check the function), or refused in one line naming the
    opset when it cannot be converted."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if not opset or _qdq_runs_at(opset):
        return model
    target = next((v for v in range(opset - 1, 9, -1) if _qdq_runs_at(v)), None)
    runtime = f"onnxruntime {ort.__version__}"
    if target is None:
        raise UserError(f"quantize: {runtime} cannot quantize at opset {opset} (the model's)")
    try:
        converted = version_converter.convert_version(model, target)
    except Exception as exc:  # the converter's bare C++ errors
        raise UserError(f"quantize: the model's opset {opset} is newer than {runtime} "
                        f"quantizes (up to {target}), and onnx cannot convert it down: "
                        f"{str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}"
                        f"; export it at opset {target}") from exc
    log.info("quantize: the model's opset %d is newer than %s quantizes; converted to "
             "opset %d", opset, runtime, target)
    return converted


def float_nodes(model: onnx.ModelProto, cfg: DictConfig,
                layers: list[tuple[str, ...]]) -> list[str]:
    """Nodes kept in float: by name / fnmatch pattern, and every node of the first / last N
    layers (``quantization/layers.py``: a compute node and the activation that follows)."""
    names = [n.name for n in model.graph.node]
    keep = {n for pattern in cfg.keep_float for n in names if fnmatch.fnmatch(n, pattern)}
    unknown = [p for p in cfg.keep_float if not any(fnmatch.fnmatch(n, p) for n in names)]
    if unknown:
        raise UserError(f"quant.keep_float: no node matches '{unknown[0]}'")
    chosen = layers[: cfg.keep_first_n] + (layers[-cfg.keep_last_n:] if cfg.keep_last_n else [])
    return sorted(keep | {n for layer in chosen for n in layer})


def named(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give every node a unique name (quantization and reports address nodes by name)."""
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type.lower()}_{i}"
        seen.add(node.name)
    return model


class PrefetchedSession:
    """A session whose ``run`` answers a known sequence of feeds from outputs computed
    beforehand, ``onnx_io.parallel_workers()`` at a time. onnxruntime's calibrators call
    ``run`` once per feed, in order, and keep every output; they get the same outputs in
    the same order, so the ranges are bit-identical and the loop uses every core."""

    def __init__(self, session: ort.InferenceSession, feeds: list[dict],
                 step: Callable[[], None] | None = None) -> None:
        self._session = session
        self._outputs = iter(onnx_io.run_all(session, feeds, "calibration", step))

    def run(self, output_names, feed) -> list[np.ndarray]:
        return next(self._outputs)

    def __getattr__(self, name: str):
        return getattr(self._session, name)


def calibrate(model_path: Path, feeds: list[dict], cfg: DictConfig, cache: Path) -> None:
    method = cfg.calibration.method  # an enum of the schema: one of METHODS
    options = {"symmetric": bool(cfg.activation_symmetric)}
    if method in ("entropy", "percentile"):
        options["num_bins"] = int(cfg.calibration.num_bins)
    if method == "entropy":
        options["num_quantized_bins"] = int(cfg.calibration.num_quantized_bins)
    if method == "percentile":
        options["percentile"] = float(cfg.calibration.percentile)
    with tempfile.TemporaryDirectory() as tmp:
        calibrator = create_calibrator(model_path, None, f"{tmp}/augmented.onnx",
                                       calibrate_method=METHODS[method], extra_options=options)
        # the calibrator's own session uses all cores; ranges must be bit-reproducible
        session = ort.InferenceSession(
            calibrator.augmented_model_path,
            onnx_io.session_options(optimized=False), providers=["CPUExecutionProvider"])
        with task("quantize: calibration batches", len(feeds)) as step:
            calibrator.infer_session = PrefetchedSession(session, feeds, step)
        calibrator.collect_data(ListReader(feeds))
        ranges = calibrator.compute_data()
    # onnxruntime collects the tensors from a set: sorted, the cache file is the same bytes
    # from run to run (DVC sees no change where there is none)
    save_tensors_data(TensorsData(ranges.calibration_method, dict(sorted(ranges.data.items()))),
                      cache)


def quantize_int(model_path: Path, out_path: Path, cache: Path, cfg: DictConfig,
                 exclude: list[str], only: list[str] | None = None) -> None:
    """QDQ quantization from the range cache; ``only`` restricts it to some nodes."""
    # QDQDisableWeightAdjustForInt32Bias: onnxruntime 1.32's int32-bias scale adjustment
    # crashes on per-channel Gemm weights (array truth value); it only matters for scales
    # below int32 bias resolution, which our models do not reach.
    extra = {"ActivationSymmetric": bool(cfg.activation_symmetric),
             "WeightSymmetric": bool(cfg.weight_symmetric),
             "MinimumRealRange": MINIMUM_REAL_RANGE,
             "QDQDisableWeightAdjustForInt32Bias": True}
    if cfg.tensor_overrides:
        extra["TensorQuantOverrides"] = {
            t: [{"quant_type": QTYPES[q]}] for t, q in cfg.tensor_overrides.items()}
    try:
        quantize_static(
            str(model_path), str(out_path), None, quant_format=QuantFormat.QDQ,
            per_channel=bool(cfg.per_channel), activation_type=QTYPES[cfg.activation_type],
            weight_type=QTYPES[cfg.weight_type], nodes_to_exclude=exclude,
            nodes_to_quantize=only, calibration_cache_path=str(cache), extra_options=extra,
            calibrate_method=METHODS[cfg.calibration.method],
        )
    except (KeyError, ValueError, IndexError) as exc:  # its lookups on graphs it cannot handle
        raise UserError(f"quantize: onnxruntime.quantization failed on this graph "
                        f"({type(exc).__name__}: {str(exc)[:160]}); quant=fp16 or "
                        "quant.keep_float=[...] around the failing node may avoid it") from exc


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """fp16 weights and activations, fp32 graph I/O. The intermediate value_info (which
    the optimizer's shape inference leaves behind) is dropped first: onnxconverter-common
    keeps it stale around the ops it leaves in fp32 (Resize), and onnxruntime then refuses
    the Cast it inserted after them (seen on yolov5s)."""
    from onnxconverter_common import float16

    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    del stripped.graph.value_info[:]
    # a graph output that other nodes also read (a language model's KV cache) gets the
    # converter's output Cast while its readers expect fp16: give the output its own
    # Identity, so the readers keep the fp16 tensor and the Cast follows the Identity
    read = {i for n in stripped.graph.node for i in n.input}
    for out in stripped.graph.output:
        if out.name in read:
            inner = f"{out.name}_fp16"
            for n in stripped.graph.node:
                n.output[:] = [inner if o == out.name else o for o in n.output]
                n.input[:] = [inner if i == out.name else i for i in n.input]
            stripped.graph.node.append(onnx.helper.make_node(
                "Identity", [inner], [out.name], name=f"{out.name}_output"))
    return float16.convert_float_to_float16(stripped, keep_io_types=True)


def weight_only(model: onnx.ModelProto, cfg: DictConfig) -> onnx.ModelProto:
    """Integer MatMul weights, float activations (w4a16): onnxruntime's
    ``MatMulNBitsQuantizer`` in QDQ form, so each weight is an int4 (or int8) initializer
    behind a blocked ``DequantizeLinear`` that the compiler folds like any other. One scale
    per output channel (``quant.group_size=0``) is one block as deep as the deepest MatMul;
    otherwise ``group_size`` input rows share a scale. No calibration: weights only."""
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    inits = {i.name: i for i in model.graph.initializer}
    depths = [inits[n.input[1]].dims[0] for n in model.graph.node
              if n.op_type == "MatMul" and n.input[1] in inits and len(inits[n.input[1]].dims) == 2]
    if not depths:
        raise UserError("quant.scheme=weight_only: the model has no MatMul with a constant 2-D "
                        "weight to quantize")
    block = cfg.group_size or 1 << max(16, max(depths) - 1).bit_length()
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    # a weight several MatMuls share (a language model's phases) is quantized once, at its
    # first consumer, and the others read that DequantizeLinear's output: the quantizer
    # would otherwise define the same dequantized name once per consumer
    first: dict[str, str] = {}
    for n in model.graph.node:
        if n.op_type == "MatMul" and n.input[1] in inits:
            first.setdefault(n.input[1], n.name)
    # the quantizer renames (in place) the MatMuls it rewrites; their outputs keep their names
    output_of = {n.name: n.output[0] for n in model.graph.node}
    quantizer = MatMulNBitsQuantizer(model, bits=cfg.weight_bits, block_size=block,
                                     is_symmetric=cfg.weight_symmetric,
                                     quant_format=QuantFormat.QDQ,
                                     nodes_to_exclude=[n.name for n in model.graph.node
                                                       if n.op_type == "MatMul"
                                                       and n.name not in first.values()])
    quantizer.process()
    out = quantizer.model.model
    weight_of = {output_of[name]: w for w, name in first.items()}
    dequantized = {weight_of[n.output[0]]: n.input[1] for n in out.graph.node
                   if n.op_type == "MatMul" and n.output[0] in weight_of}
    for n in out.graph.node:
        if n.op_type == "MatMul" and n.input[1] in dequantized:
            n.input[1] = dequantized[n.input[1]]
    used = {i for n in out.graph.node for i in n.input}
    keep = [i for i in out.graph.initializer if i.name in used]
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    return out
