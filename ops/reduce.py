"""Reductions (ReduceMean/Sum/Max/Min/Prod/L2, ArgMax/ArgMin): one op per input element."""

from __future__ import annotations

from ops.constraints import COMMON
from ops.graph import Graph, Node
from ops.work import VECTOR, Work


def reduce_work(node: Node, graph: Graph) -> Work:
    x = graph.tensors[node.inputs[0]]
    return Work(VECTOR, vector_ops=x.size, input_elems=x.size,
                output_elems=graph.tensors[node.outputs[0]].size)


REDUCE_CHECKS = COMMON
