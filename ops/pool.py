"""Pooling: MaxPool / AveragePool (one op per window element per output) and the global
forms (one op per input element)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ops.constraints import COMMON, check_stride, constraint, int_pair
from ops.graph import Graph, Node
from ops.work import VECTOR, Work


def pool_work(node: Node, graph: Graph) -> Work:
    x = graph.tensors[node.inputs[0]]
    out = graph.tensors[node.outputs[0]].size
    if node.op_type.startswith("Global"):
        ops = x.size
    else:
        kh, kw = int_pair(node.attrs.get("kernel_shape"))
        ops = out * kh * kw
    return Work(VECTOR, vector_ops=ops, input_elems=x.size, output_elems=out)


@constraint("kernel_max")
def check_pool_kernel(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Pooling window must be at most {kernel_max} in both dimensions"""
    if node.op_type.startswith("Global"):
        shape = graph.tensors[node.inputs[0]].shape or (0, 0, 0, 0)
        kh, kw = int_pair(shape[2:])
    else:
        kh, kw = int_pair(node.attrs.get("kernel_shape"))
    return max(kh, kw) <= limits["kernel_max"], f"window {kh}x{kw}"


POOL_CHECKS = (*COMMON, check_pool_kernel, check_stride)
