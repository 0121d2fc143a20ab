"""Elementwise binary ops (Add, Sub, Mul, Div, Pow, Max, Min, Sum, Mean) with broadcasting:
one vector operation per output element per extra operand."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ops.constraints import COMMON, constraint
from ops.graph import Graph, Node
from ops.work import VECTOR, Work

# Element operations of an integer (quantized) elementwise op. Operands with different
# scales must be brought to a common one before they combine: an int8 Add rescales both
# inputs (multiply + shift each), adds, then requantizes the sum (multiply, shift) and
# clamps; a Mul multiplies and requantizes once. Vela's Ethos-U55-256 model charges the
# same ratios (output_cycles_per_elem: Add 0.75, Mul 0.375, MaxPool 0.125 cycles per
# element on 8 elementwise units = 6, 3 and 1 operations per element).
INTEGER_OPS_PER_ELEMENT = {"Add": 6, "Sub": 6, "Mul": 3}


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
