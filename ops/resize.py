"""Resize / Upsample: nearest copies one element per output; linear interpolation reads
four neighbours and blends them (7 ops per output element)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ops.constraints import COMMON, constraint
from ops.graph import Graph, Node
from ops.work import VECTOR, Work


def _mode(node: Node) -> str:
    return str(node.attrs.get("mode", "nearest"))


def resize_work(node: Node, graph: Graph) -> Work:
    x = graph.tensors[node.inputs[0]]
    out = graph.tensors[node.outputs[0]].size
    per = 1 if _mode(node) == "nearest" else 7
    return Work(VECTOR, vector_ops=out * per, input_elems=x.size, output_elems=out)


@constraint("modes")
def check_resize_mode(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Interpolation mode must be one of {modes}"""
    return _mode(node) in list(limits["modes"]), f"mode {_mode(node)}"


@constraint("scale_max")
def check_resize_scale(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Integer upscaling factor of at most {scale_max} in height and width"""
    x, y = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    if not x or not y or len(x) < 4:
        return False, "unknown scale"
    fh, fw = y[2] / x[2], y[3] / x[3]
    ok = fh == int(fh) and fw == int(fw) and max(fh, fw) <= limits["scale_max"]
    return ok, f"scale {fh:g}x{fw:g}"


RESIZE_CHECKS = (*COMMON, check_resize_mode, check_resize_scale)
