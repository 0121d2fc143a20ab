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
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from omegaconf import DictConfig
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

COMPUTE_OPS = WEIGHTED_OPS  # the ops a layer is anchored on (ops/quant.py)
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


def refuse_prequantized(model: onnx.ModelProto, scheme: str) -> None:
    """Calibrating a model that is already quantized would quantize twice (and
    onnxruntime.quantization fails on such graphs): say so and point to quant=none."""
    found = sorted({n.op_type for n in model.graph.node if n.op_type in QUANTIZED_OPS})
    if found and scheme != "none":
        raise UserError(f"quant.scheme={scheme}: the model is already quantized "
                        f"({', '.join(found)}); use quant=none to compile it as shipped")


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

    def __init__(self, session: ort.InferenceSession, feeds: list[dict]) -> None:
        self._session = session
        self._outputs = iter(onnx_io.run_all(session, feeds, "calibration"))

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
        calibrator.infer_session = PrefetchedSession(session, feeds)
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
    return float16.convert_float_to_float16(stripped, keep_io_types=True)
