"""Fold QuantizeLinear/DequantizeLinear into tensor annotations.

In a QDQ model (onnxruntime.quantization's default format) every quantized tensor appears
as ``x -> QuantizeLinear -> q -> DequantizeLinear -> x'`` and every quantized weight as
``W_q (int8 constant) -> DequantizeLinear -> W'``. An NPU runs the compute op on the
integer tensors directly, with the requantization folded into the producer's epilogue. So
the IR drops the Q/DQ nodes, points each consumer at the integer-carrying tensor, and
records the integer type, scale and zero point on that tensor.
"""

from __future__ import annotations

from ops.graph import QDQ_OPS, Graph, Node

_INT_PRECISION = {"int8": "int8", "uint8": "int8", "int16": "int16", "uint16": "int16",
                  "int32": "int32", "int4": "int4", "uint4": "int4"}
_WIDTH = {"int8": 1, "int16": 2, "fp16": 2, "bf16": 2, "fp32": 4, "int32": 4, "fp64": 8}


def fold_qdq(graph: Graph) -> Graph:
    producers = graph.producers()
    consumers = graph.consumers()
    rename: dict[str, str] = {}
    removed: set[str] = set()
    for node in graph.nodes:
        if node.op_type != "DequantizeLinear":
            continue
        src = graph.tensors[node.inputs[0]]
        scale = graph.tensor(node.inputs[1])
        zero = graph.tensor(node.inputs[2]) if len(node.inputs) > 2 else None
        target = src
        if not src.is_const:
            q = producers.get(src.name)
            if q is None or q.op_type != "QuantizeLinear":
                continue
            target = graph.tensors[q.inputs[0]]
            if all(c.op_type == "DequantizeLinear" for c in consumers.get(src.name, [])):
                removed.add(q.name)
        target.precision = _INT_PRECISION.get(src.dtype, src.dtype)
        target.scale = scale.value() if scale is not None else None
        target.zero_point = zero.value() if zero is not None else None
        rename[node.outputs[0]] = target.name
        removed.add(node.name)
    nodes = [
        Node(n.name, n.op_type, [rename.get(i, i) for i in n.inputs], n.outputs, n.attrs,
             n.domain, n.subgraphs)
        for n in graph.nodes if n.name not in removed
    ]
    outputs = [rename.get(o, o) for o in graph.outputs]
    return Graph(graph.name, nodes, graph.tensors, graph.inputs, outputs, graph.opset,
                 graph.io_layout)


WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def node_precision(node: Node, graph: Graph) -> str:
    """The precision a compute node runs in: its widest activation input (weights of a
    W8 kernel do not widen it), e.g. int8 x int8 -> int8, int16 x int8 -> int16. A weighted
    op whose weight stayed float (a layer kept float in a quantized model: its input still
    arrives quantized from its int8 neighbour) computes in float: "fp32", which the
    compiler maps to the float precision the quantize stage chose."""
    if node.op_type in WEIGHTED_OPS and len(node.inputs) > 1:
        weight = graph.tensor(node.inputs[1])
        if weight is not None and weight.is_const and \
                _INT_PRECISION.get(weight.effective_dtype) is None:
            return "fp32"
    best, width = "fp32", 0
    for name in node.inputs:
        t = graph.tensor(name)
        if t is None or t.is_const:
            continue
        prec = _INT_PRECISION.get(t.effective_dtype, t.effective_dtype)
        if _WIDTH.get(prec, 4) > width:
            best, width = prec, _WIDTH.get(prec, 4)
    return best if width else "fp32"


def has_qdq(graph: Graph) -> bool:
    return any(n.op_type in QDQ_OPS for n in graph.nodes)
