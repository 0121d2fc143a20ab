"""A TFLite flatbuffer read into plain Python: tensors with their own quantization, ops in
the file's order with their options.

The flatbuffer is decoded with LiteRT's own generated schema
(``ai_edge_litert.schema_py_generated``, the ``tflite`` extra): the package whose interpreter
defines the file's integer arithmetic also defines how it is read, so one maintained
dependency serves both. tf2onnx's TFLite path needs TensorFlow (hundreds of MB, seconds to
import) and tflite2onnx (unmaintained since 2021) loses per-channel int8; neither keeps
every scale and zero point of the file as they are, which is what npuflow needs.

Every way a file can be unusable is one line naming the op or tensor: not a TFLite file
(or truncated), more than one subgraph, a custom op, a dynamic dimension, float16 weights
(a float16 "quantized" file dequantizes at load; npuflow would cost it as float32).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import UserError

TENSOR_TYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64,
                6: np.bool_, 7: np.int16, 9: np.int8, 10: np.float64}


def _schema() -> Any:
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError as exc:
        raise UserError("model=tflite needs pip install 'npuflow[tflite]' (LiteRT)") from exc
    return schema_py_generated


@dataclass(frozen=True)
class Quant:
    """The file's quantization of one tensor: real = (q - zero_point) * scale, per tensor
    or per slice of ``axis``."""
    scale: np.ndarray  # float32, one or per channel
    zero_point: np.ndarray  # int64, same length
    axis: int

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    quant: Quant | None
    data: np.ndarray | None  # constants (weights, biases, shapes); None for activations

    @property
    def is_constant(self) -> bool:
        return self.data is not None


@dataclass
class Op:
    kind: str  # the builtin operator's name, e.g. CONV_2D
    inputs: list[int]  # tensor indices; -1 for an omitted optional input
    outputs: list[int]
    options: Any  # the op's *OptionsT object from the schema, or None
    version: int = 1


@dataclass
class TFLiteModel:
    path: Path
    tensors: list[Tensor]
    ops: list[Op]
    inputs: list[int]
    outputs: list[int]
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def tensor(self, index: int) -> Tensor:
        return self.tensors[index]


def _names(enum: Any) -> dict[int, str]:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_")}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def read(path: str | Path) -> TFLiteModel:
    """Decode ``path``; one line for each way it cannot be used."""
    schema = _schema()
    path = Path(path)
    if not path.is_file():
        raise UserError(f"model.path: no such file '{path}'")
    raw = path.read_bytes()
    if len(raw) < 8 or raw[4:8] != b"TFL3":
        raise UserError(f"model.path: '{path}' is not a TFLite file (no TFL3 identifier)")
    try:
        model = schema.ModelT.InitFromPackedBuf(raw, 0)
    except Exception as exc:  # flatbuffers raises struct / index errors on a cut file
        raise UserError(f"model.path: '{path}' is not a complete TFLite file "
                        f"({type(exc).__name__}: truncated or damaged)") from exc
    if not model.subgraphs or len(model.subgraphs) != 1:
        raise UserError(f"model.path: '{path}' has {len(model.subgraphs or [])} subgraphs; "
                        "npuflow reads single-graph files (no control flow)")
    graph = model.subgraphs[0]
    tensors = [_tensor(i, t, model, raw, path) for i, t in enumerate(graph.tensors or [])]
    seen: dict[str, int] = {}
    for t in tensors:  # names need not be unique in a TFLite file; in ONNX they must
        seen[t.name] = seen.get(t.name, 0) + 1
        if seen[t.name] > 1:
            t.name = f"{t.name}:{t.index}"
    ops = [_op(o, model, schema, tensors, path) for o in graph.operators or []]
    _check_weights(tensors, ops, path)
    return TFLiteModel(path, tensors, ops, [int(i) for i in graph.inputs],
                       [int(i) for i in graph.outputs], _text(model.description))


def _tensor(index: int, t: Any, model: Any, raw: bytes, path: Path) -> Tensor:
    name = _text(t.name) or f"tensor_{index}"
    if t.type not in TENSOR_TYPES:
        raise UserError(f"model.path: '{path}': tensor '{name}' has TFLite type {t.type}, "
                        "which npuflow does not read")
    shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
    signature = [int(d) for d in (t.shapeSignature if t.shapeSignature is not None else ())]
    dynamic = [i for i, d in enumerate(signature) if d < 0]
    if dynamic and (dynamic != [0] or not shape or shape[0] < 1):
        # a dynamic batch (Keras writes [-1, ...]) runs at the file's own batch, as Vela
        # and the interpreter run it; any other dynamic dimension has no size to plan for
        raise UserError(f"model.path: '{path}': tensor '{name}' has a dynamic shape "
                        f"{signature}; convert it with a fixed input shape")
    if t.sparsity is not None:
        raise UserError(f"model.path: '{path}': tensor '{name}' is stored sparse, which "
                        "npuflow does not read")
    dtype = np.dtype(TENSOR_TYPES[t.type])
    data = None
    buffer = model.buffers[t.buffer] if t.buffer < len(model.buffers or []) else None
    if buffer is not None:
        blob = None
        if buffer.data is not None and len(buffer.data):
            blob = np.asarray(buffer.data, np.uint8).tobytes()
        elif buffer.offset and buffer.offset > 1:  # stored after the flatbuffer (> 2 GB)
            blob = raw[buffer.offset: buffer.offset + buffer.size]
        if blob is not None:
            data = np.frombuffer(blob, dtype).reshape(shape).copy()
    return Tensor(index, name, shape, dtype, _quant(t.quantization), data)


def _quant(q: Any) -> Quant | None:
    if q is None or q.scale is None or len(q.scale) == 0:
        return None
    scale = np.asarray(q.scale, np.float32)
    zero = np.asarray(q.zeroPoint if q.zeroPoint is not None else np.zeros(scale.size),
                      np.int64)
    if zero.size == 1 and scale.size > 1:
        zero = np.repeat(zero, scale.size)
    return Quant(scale, zero, int(q.quantizedDimension or 0))


def _op(o: Any, model: Any, schema: Any, tensors: list[Tensor], path: Path) -> Op:
    code = model.operatorCodes[o.opcodeIndex]
    builtin = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
    name = _names(schema.BuiltinOperator).get(builtin, f"builtin {builtin}")
    outputs = [int(i) for i in o.outputs]
    where = tensors[outputs[0]].name if outputs else "?"
    if name == "CUSTOM":
        raise UserError(f"model.path: '{path}': op '{where}' is the custom op "
                        f"'{_text(code.customCode)}', which only its own runtime defines")
    return Op(name, [int(i) for i in o.inputs], outputs, o.builtinOptions, int(code.version))


def _check_weights(tensors: list[Tensor], ops: list[Op], path: Path) -> None:
    """float16 weights with a DEQUANTIZE in front: a size-optimised float file."""
    for op in ops:
        if op.kind == "DEQUANTIZE":
            src = tensors[op.inputs[0]]
            if src.is_constant and src.dtype == np.float16:
                raise UserError(f"model.path: '{path}': tensor '{src.name}' holds float16 "
                                "weights dequantized at load; npuflow reads float32 or "
                                "integer-quantized TFLite files")
