"""Reductions (ReduceMean/Sum/Max/Min/Prod/L2, ArgMax/ArgMin): one op per input element.
``spatial_mean`` says which are a mean over a feature map's height and width, which some
NPUs run as a depthwise convolution instead (``hardware/depthwise.py``)."""

from __future__ import annotations

from ops.constraints import COMMON
from ops.graph import Graph, Node
from ops.work import VECTOR, Work


def reduce_work(node: Node, graph: Graph) -> Work:
    x = graph.tensors[node.inputs[0]]
    return Work(VECTOR, vector_ops=x.size, input_elems=x.size,
                output_elems=graph.tensors[node.outputs[0]].size)


REDUCE_CHECKS = COMMON


def spatial_mean(node: Node, graph: Graph) -> tuple[int, int, int] | None:
    """(batch, channels, pixels) of a mean over the H and W of an NCHW map (ReduceMean over
    axes 2 and 3, GlobalAveragePool); None for any other op or reduction."""
    x = graph.tensors[node.inputs[0]]
    if x.shape is None or len(x.shape) != 4:
        return None
    n, c, h, w = x.shape
    if node.op_type == "GlobalAveragePool":
        return n, c, h * w
    if node.op_type != "ReduceMean":
        return None
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        value = graph.tensors[node.inputs[1]].value
        axes = None if value is None else [int(a) for a in value.ravel()]
    if axes is None:
        return None
    return (n, c, h * w) if sorted(a % 4 for a in axes) == [2, 3] else None
