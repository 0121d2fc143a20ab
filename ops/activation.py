"""Activations and Softmax on the vector unit.

Ops per element are the arithmetic a vector unit issues: comparisons and multiply-adds for
the piecewise-linear ones; transcendental functions count as the 4-6 operations of the
lookup-table + interpolation NPUs use (and a host's polynomial evaluation is of the same
order). Softmax is max, subtract, exp, sum, divide along the axis: 5 per element.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ops.constraints import COMMON, constraint
from ops.graph import Graph, Node
from ops.work import VECTOR, Work, reduction_of

OPS_PER_ELEMENT = {
    "Relu": 1, "Clip": 2, "LeakyRelu": 2, "PRelu": 2, "HardSigmoid": 3, "HardSwish": 4,
    "Sigmoid": 4, "Tanh": 4, "Exp": 4, "Log": 4, "Erf": 6, "Gelu": 8, "Swish": 5, "Silu": 5,
    "Softplus": 5, "Mish": 10, "Elu": 5, "Selu": 5, "Sqrt": 4, "Reciprocal": 4, "Neg": 1,
    "Abs": 1, "Floor": 1, "Ceil": 1, "Round": 1, "Sign": 1, "Not": 1, "Softmax": 5,
    "LogSoftmax": 6, "Cast": 1,
}
# transcendental evaluations per output element (exp, tanh, erf, log): what a host that
# evaluates them one at a time pays beyond its arithmetic (``host.transcendental_ns``)
TRANSCENDENTALS = {
    "Sigmoid": 1, "Tanh": 1, "Exp": 1, "Log": 1, "Erf": 1, "Gelu": 1, "Swish": 1, "Silu": 1,
    "Softplus": 2, "Mish": 3, "Elu": 1, "Selu": 1, "Softmax": 1, "LogSoftmax": 2,
}


def activation_work(node: Node, graph: Graph) -> Work:
    x = graph.tensors[node.inputs[0]]
    out = graph.tensors[node.outputs[0]].size
    const = sum(graph.tensors[i].size for i in node.inputs[1:] if i)
    per = OPS_PER_ELEMENT.get(node.op_type, 4)
    return Work(VECTOR, vector_ops=out * per, input_elems=x.size, weight_elems=const,
                output_elems=out, transcendentals=out * TRANSCENDENTALS.get(node.op_type, 0),
                reduction=reduction_of(node.op_type))


@constraint("clip_range")
def check_clip_range(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Clip bounds must be constants (a fusable ReLU/ReLU6 bound): {clip_range}"""
    bounds = [graph.tensors[i] for i in node.inputs[1:] if i]
    const = all(t.is_const for t in bounds)
    return const or not limits["clip_range"], "constant bounds" if const else "dynamic bounds"


@constraint("axis_last")
def check_softmax_axis(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Softmax only along the innermost axis: {axis_last}"""
    rank = len(graph.tensors[node.inputs[0]].shape or ())
    axis = int(node.attrs.get("axis", -1))
    last = axis in (-1, rank - 1)
    return last or not limits["axis_last"], f"axis {axis} of rank {rank}"


@constraint("max_axis_size")
def check_softmax_size(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """The softmax axis may hold at most {max_axis_size} elements"""
    shape = graph.tensors[node.inputs[0]].shape or (0,)
    size = shape[int(node.attrs.get("axis", -1))]
    return size <= limits["max_axis_size"], f"axis size {size}"


ACTIVATION_CHECKS = (*COMMON, check_clip_range)
SOFTMAX_CHECKS = (*COMMON, check_softmax_axis, check_softmax_size)
