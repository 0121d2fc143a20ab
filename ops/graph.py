"""npuflow's graph IR: nodes and statically shaped tensors built from an ONNX model.

Why not work on ``onnx.ModelProto`` directly: the compiler and cost model need, for every
compute op, its operand shapes, its precision and its quantization parameters in one place.
In a QDQ model those live on QuantizeLinear/DequantizeLinear nodes around the op; here they
are folded into the tensors (``Tensor.precision`` / ``Tensor.scale``) so each compute node
reads as "Conv, int8 in, int8 weights" and the Q/DQ nodes themselves disappear.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

_ONNX_DTYPE_NAMES = {
    onnx.TensorProto.FLOAT: "fp32",
    onnx.TensorProto.FLOAT16: "fp16",
    onnx.TensorProto.INT4: "int4",
    onnx.TensorProto.UINT4: "uint4",
    onnx.TensorProto.BFLOAT16: "bf16",
    onnx.TensorProto.DOUBLE: "fp64",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.BOOL: "bool",
}
BYTES_PER_ELEMENT = {
    "fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8, "int8": 1, "uint8": 1, "int16": 2,
    "uint16": 2, "int32": 4, "int64": 8, "bool": 1,
}
BITS_PER_ELEMENT = {"int4": 4, "uint4": 4}  # packed two to a byte
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...] | None  # None: unknown rank or a dynamic dim
    dtype: str  # storage dtype in the ONNX graph (fp32, int8, ...)
    is_const: bool = False
    precision: str | None = None  # set by Q/DQ folding: the precision the NPU computes in
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    proto: onnx.TensorProto | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape is not None else 0

    @property
    def effective_dtype(self) -> str:
        return self.precision or self.dtype

    @property
    def nbytes(self) -> int:
        bits = BITS_PER_ELEMENT.get(self.effective_dtype)
        if bits is not None:
            return -(-self.size * bits // 8)
        return self.size * BYTES_PER_ELEMENT.get(self.effective_dtype, 4)

    def value(self) -> np.ndarray | None:
        return numpy_helper.to_array(self.proto) if self.proto is not None else None

    def real_value(self) -> np.ndarray | None:
        """The constant's real value: integer data that Q/DQ folding gave a scale and
        zero point is dequantized, (q - zero_point) * scale."""
        data = self.value()
        if data is None or self.scale is None or data.dtype.kind not in "iu":
            return data
        zero = 0.0 if self.zero_point is None else np.asarray(self.zero_point, np.float64)
        return (data.astype(np.float64) - zero) * np.asarray(self.scale, np.float64)


@dataclass
class Node:
    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    domain: str = ""
    subgraphs: int = 0  # control flow (If/Loop/Scan bodies) the cost model cannot see into


IO_LAYOUT_KEY = "npuflow.io_layout"


@dataclass
class Graph:
    name: str
    nodes: list[Node]
    tensors: dict[str, Tensor]
    inputs: list[str]
    outputs: list[str]
    opset: int
    # the layout the application's rank-4 inputs and outputs are in: ONNX's NCHW, or the
    # NHWC of a file converted from TFLite (model metadata ``npuflow.io_layout``)
    io_layout: str = "NCHW"

    def tensor(self, name: str) -> Tensor | None:
        return self.tensors.get(name) if name else None

    def input_tensors(self, node: Node) -> list[Tensor | None]:
        return [self.tensor(n) for n in node.inputs]

    def output_tensors(self, node: Node) -> list[Tensor | None]:
        return [self.tensor(n) for n in node.outputs]

    def producers(self) -> dict[str, Node]:
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        table: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    table.setdefault(name, []).append(node)
        return table

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)


def _dims(type_proto: onnx.TypeProto) -> tuple[int, ...] | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = []
    for d in type_proto.tensor_type.shape.dim:
        if not d.HasField("dim_value") or d.dim_value <= 0:
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def _attrs(node: onnx.NodeProto) -> tuple[dict[str, Any], int]:
    attrs, subgraphs = {}, 0
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            subgraphs += 1
            continue
        value = helper.get_attribute_value(a)
        attrs[a.name] = value.decode() if isinstance(value, bytes) else value
    return attrs, subgraphs


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def read_onnx(model: onnx.ModelProto, infer: bool = True) -> Graph:
    """The IR of an ONNX model as it stands; shapes come from ONNX shape inference (with
    data propagation). ``ops.load.from_onnx`` adds the folds the compiler reads it with."""
    if infer:
        model = shape_inference.infer_shapes(model, data_prop=True)
    g = model.graph
    tensors: dict[str, Tensor] = {}
    for init in g.initializer:
        tensors[init.name] = Tensor(
            init.name, tuple(int(d) for d in init.dims),
            _ONNX_DTYPE_NAMES.get(init.data_type, "fp32"), is_const=True, proto=init,
        )
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.name in tensors:
            continue
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        tensors[vi.name] = Tensor(vi.name, _dims(vi.type), _ONNX_DTYPE_NAMES.get(elem, "fp32"))
    nodes = []
    for i, n in enumerate(g.node):
        attrs, subgraphs = _attrs(n)
        name = n.name or f"{n.op_type}_{i}"
        if n.op_type == "Constant" and "value" in attrs:
            proto = next(a.t for a in n.attribute if a.name == "value")
            tensors[n.output[0]] = Tensor(
                n.output[0], tuple(int(d) for d in proto.dims),
                _ONNX_DTYPE_NAMES.get(proto.data_type, "fp32"), is_const=True, proto=proto,
            )
        for out in n.output:
            tensors.setdefault(out, Tensor(out, None, "fp32"))
        nodes.append(
            Node(name, n.op_type, list(n.input), list(n.output), attrs, n.domain, subgraphs)
        )
    init_names = {i.name for i in g.initializer}
    graph = Graph(
        name=g.name,
        nodes=nodes,
        tensors=tensors,
        inputs=[i.name for i in g.input if i.name not in init_names],
        outputs=[o.name for o in g.output],
        opset=_opset(model),
        io_layout=next((p.value for p in model.metadata_props if p.key == IO_LAYOUT_KEY),
                       "NCHW"),
    )
    return graph
