"""Elementwise binary ops (Add, Sub, Mul, Div, Pow, Max, Min, Sum, Mean) with broadcasting:
one vector operation per output element per extra operand."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ops.constraints import COMMON, constraint
from ops.graph import Graph, Node
from ops.work import VECTOR, Work


def _elems(graph: Graph, names: list[str]) -> tuple[int, int]:
    act = const = 0
    for name in names:
        if name:
            t = graph.tensors[name]
            const, act = (const + t.size, act) if t.is_const else (const, act + t.size)
    return act, const


def binary_work(node: Node, graph: Graph) -> Work:
    out = graph.tensors[node.outputs[0]].size
    act, const = _elems(graph, node.inputs)
    operands = max(1, len([i for i in node.inputs if i]) - 1)
    return Work(VECTOR, vector_ops=out * operands, input_elems=act, weight_elems=const,
                output_elems=out)


@constraint("broadcast")
def check_broadcast(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Broadcasting between operands of different shapes allowed: {broadcast}"""
    shapes = {graph.tensors[i].shape for i in node.inputs if i}
    same = len(shapes) == 1
    return same or bool(limits["broadcast"]), "same shapes" if same else "broadcast"


BINARY_CHECKS = (*COMMON, check_broadcast)
