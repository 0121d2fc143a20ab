"""Normalization: BatchNormalization (inference: scale and shift, 2 ops per element; usually
folded into the preceding Conv by optimize) and LayerNormalization / InstanceNormalization
(mean, variance, normalise, scale, shift: 8 ops per element)."""

from __future__ import annotations

from ops.constraints import COMMON
from ops.graph import Graph, Node
from ops.work import VECTOR, Work, reduction_of

NORM_OPS = {"BatchNormalization": 2, "LayerNormalization": 8, "InstanceNormalization": 8,
            "GroupNormalization": 8, "LpNormalization": 4}


def norm_work(node: Node, graph: Graph) -> Work:
    x = graph.tensors[node.inputs[0]]
    const = sum(graph.tensors[i].size for i in node.inputs[1:] if i)
    return Work(VECTOR, vector_ops=x.size * NORM_OPS.get(node.op_type, 8), input_elems=x.size,
                weight_elems=const, output_elems=graph.tensors[node.outputs[0]].size,
                reduction=reduction_of(node.op_type))


NORM_CHECKS = COMMON
