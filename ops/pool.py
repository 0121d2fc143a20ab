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
    kh, kw = _window(node, graph)
    return max(kh, kw) <= limits["kernel_max"], f"window {kh}x{kw}"


def _window(node: Node, graph: Graph) -> tuple[int, int]:
    if node.op_type.startswith("Global"):
        shape = graph.tensors[node.inputs[0]].shape or (0, 0, 0, 0)
        return int_pair(shape[2:])
    return int_pair(node.attrs.get("kernel_shape"))


def _padded(node: Node) -> bool:
    pads = node.attrs.get("pads") or ()
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    return any(int(p) for p in pads) or auto in ("SAME_UPPER", "SAME_LOWER")


@constraint("padded_kernel_max")
def check_padded_kernel(node: Node, graph: Graph, limits: Mapping[str, Any]
                        ) -> tuple[bool, str]:
    """With padding, the pooling window must be at most {padded_kernel_max} in both
    dimensions (without padding the window may be larger)"""
    kh, kw = _window(node, graph)
    padded = _padded(node)
    ok = not padded or max(kh, kw) <= limits["padded_kernel_max"]
    return ok, f"window {kh}x{kw}, {'padded' if padded else 'no padding'}"


@constraint("kernel_height_max")
def check_pool_height(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Pooling window height must be at most {kernel_height_max}"""
    kh, kw = _window(node, graph)
    return kh <= limits["kernel_height_max"], f"window {kh}x{kw}"


@constraint("kernel_area_max")
def check_pool_area(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Pooling window height x width must be at most {kernel_area_max}"""
    kh, kw = _window(node, graph)
    return kh * kw <= limits["kernel_area_max"], f"window {kh}x{kw} = {kh * kw}"


@constraint("padded_stride_max")
def check_padded_stride(node: Node, graph: Graph, limits: Mapping[str, Any]
                        ) -> tuple[bool, str]:
    """With padding, stride must be at most {padded_stride_max} (without padding any
    stride)"""
    sh, sw = int_pair(node.attrs.get("strides"))
    padded = _padded(node)
    ok = not padded or max(sh, sw) <= limits["padded_stride_max"]
    return ok, f"stride {sh}x{sw}, {'padded' if padded else 'no padding'}"


POOL_CHECKS = (*COMMON, check_pool_kernel, check_stride, check_padded_kernel,
               check_pool_height, check_pool_area, check_padded_stride)
