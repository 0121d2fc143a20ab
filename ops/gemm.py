"""Gemm and (batched, broadcasting) MatMul: MACs = batch x M x K x N."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ops.constraints import COMMON, constraint
from ops.graph import Graph, Node
from ops.work import ARRAY, GemmShape, Work


def _static(node: Node, graph: Graph, i: int) -> tuple[int, ...]:
    shape = graph.tensors[node.inputs[i]].shape
    if shape is None:
        raise ValueError(f"{node.op_type} '{node.name}' has a dynamic shape")
    return shape


def _const_elems(node: Node, graph: Graph) -> tuple[int, int]:
    """(activation elements, constant elements) over the node's inputs."""
    act = const = 0
    for name in node.inputs:
        if not name:
            continue
        t = graph.tensors[name]
        if t.is_const:
            const += t.size
        else:
            act += t.size
    return act, const


def gemm_work(node: Node, graph: Graph) -> Work:
    a, b = _static(node, graph, 0), _static(node, graph, 1)
    m, k = (a[1], a[0]) if node.attrs.get("transA", 0) else (a[0], a[1])
    n = b[0] if node.attrs.get("transB", 0) else b[1]
    act, const = _const_elems(node, graph)
    gemm = GemmShape(m=m, k=k, n=n)
    return Work(ARRAY, macs=gemm.macs, input_elems=act, weight_elems=const,
                output_elems=graph.tensors[node.outputs[0]].size, gemm=gemm)


def matmul_work(node: Node, graph: Graph) -> Work:
    """numpy matmul semantics: 1-D operands are promoted, leading dims broadcast.

    Batch dims of A fold into M when B is shared (a weight), which is how an NPU runs a
    (1, 128, 768) x (768, 768) projection: one GEMM with M = 128; otherwise they are
    independent GEMMs (attention heads)."""
    a, b = list(_static(node, graph, 0)), list(_static(node, graph, 1))
    a = [1, *a] if len(a) == 1 else a
    b = [*b, 1] if len(b) == 1 else b
    batch_a, batch_b = a[:-2], b[:-2]
    batch = int(np.prod(np.broadcast_shapes(tuple(batch_a), tuple(batch_b)), dtype=np.int64))
    m, k, n = a[-2], a[-1], b[-1]
    if int(np.prod(batch_b, dtype=np.int64)) == 1:
        gemm = GemmShape(m=m * batch, k=k, n=n)
    else:
        gemm = GemmShape(m=m, k=k, n=n, groups=batch)
    act, const = _const_elems(node, graph)
    return Work(ARRAY, macs=gemm.macs, input_elems=act, weight_elems=const,
                output_elems=graph.tensors[node.outputs[0]].size, gemm=gemm)


@constraint("const_weights")
def check_const_weights(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Second operand must be constant weights: {const_weights}"""
    const = graph.tensors[node.inputs[1]].is_const
    return const or not limits["const_weights"], "constant B" if const else "B is an activation"


@constraint("max_k")
def check_max_k(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Reduction dimension K must be at most {max_k}"""
    work = gemm_work(node, graph) if node.op_type == "Gemm" else matmul_work(node, graph)
    assert work.gemm is not None
    return work.gemm.k <= limits["max_k"], f"K {work.gemm.k}"


GEMM_CHECKS = (*COMMON, check_const_weights, check_max_k)
