"""A kernel's work and precision, and its channel-aligned form on the NPU.

A fused kernel's arithmetic is its anchor's; epilogue ops (bias, BN, activation, residual
add) run in the array's output pipeline at the rate outputs leave it, so they add no
compute cycles, and their intermediates never leave the kernel, so they add no bytes.
Only the kernel's external inputs and outputs are read and written.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ops.activation import OPS_PER_ELEMENT
from ops.elementwise import INTEGER_OPS_PER_ELEMENT
from ops.graph import Graph
from ops.quant import node_precision
from ops.registry import work_of
from ops.work import ARRAY, FREE, MEMORY, VECTOR, Work
from pipeline.compiler.fusion import Kernel

SCHEME_PRECISION = {"int8": "int8", "fp16": "fp16", "none": "fp32"}


def kernel_precision(kernel: Kernel, graph: Graph, float_precision: str) -> str:
    """Integer precision from the (Q/DQ-folded) graph, else the quant scheme's."""
    found = node_precision(kernel.anchor, graph)
    return float_precision if found == "fp32" else found


def _integer_extra_ops(kernel: Kernel, graph: Graph, precision: str) -> int:
    """Rescale operations an integer elementwise op adds (``INTEGER_OPS_PER_ELEMENT``)."""
    if not precision.startswith("int"):
        return 0
    extra = 0
    for node in kernel.nodes:
        per = INTEGER_OPS_PER_ELEMENT.get(node.op_type)
        if per:
            extra += (per - 1) * graph.tensors[node.outputs[0]].size
    return extra


def kernel_work(kernel: Kernel, graph: Graph, precision: str = "fp32") -> Work:
    works = [work_of(n, graph) for n in kernel.nodes]
    consts = sum(w.weight_elems for w in works)
    ins = sum(graph.tensors[t].size for t in kernel.inputs)
    outs = sum(graph.tensors[t].size for t in kernel.outputs)
    anchor = works[0]
    if anchor.unit == ARRAY:
        return Work(ARRAY, macs=anchor.macs, input_elems=ins, weight_elems=consts,
                    output_elems=outs, gemm=anchor.gemm)
    if kernel.composite:
        ops = OPS_PER_ELEMENT.get(kernel.composite, 4) * outs
        return Work(VECTOR, vector_ops=ops, input_elems=ins, weight_elems=consts,
                    output_elems=outs)
    units = {w.unit for w in works}
    unit = VECTOR if VECTOR in units else MEMORY if MEMORY in units else FREE
    return Work(unit, vector_ops=sum(w.vector_ops for w in works)
                + _integer_extra_ops(kernel, graph, precision), input_elems=ins,
                weight_elems=consts, output_elems=outs)


def _up(value: int, multiple: int) -> int:
    return math.ceil(value / multiple) * multiple


def aligned(work: Work, kernel: Kernel, graph: Graph, alignment: int, tap_channels: int = 0
            ) -> Work:
    """Pad channels to the NPU's multiple: the GEMM (so compute cycles) and the bytes grow;
    ``macs`` stays the useful count, so utilization shows the waste. Inputs the host wrote
    (graph inputs) stay unpadded in DRAM: the padding happens as the NPU loads them, so
    their DRAM bytes are the tensors' own (``input_dram_ratio``). A direct-convolution array
    (``tap_channels`` > 0, NVDLA's atomic-C) reads every kernel tap's channels as whole
    atoms: a convolution's GEMM depth is taps x ceil(Cin / atom) x atom, while its bytes
    keep the memory layout's ``alignment``."""
    if (alignment <= 1 and tap_channels <= 1) or work.gemm is None:
        return work
    alignment = max(alignment, 1)
    g = work.gemm
    if kernel.anchor.op_type == "Conv":
        cin = graph.tensors[kernel.anchor.inputs[0]].shape[1]
        area = g.k // max(cin // g.groups, 1)
        if g.groups == 1:
            stored = replace(g, k=_up(cin, alignment) * area, n=_up(g.n, alignment))
            gemm = replace(stored, k=_up(cin, max(alignment, tap_channels)) * area)
            in_scale, out_scale = _up(cin, alignment) / cin, gemm.n / g.n
        else:  # depthwise / grouped: pad the number of groups (channels)
            gemm = stored = replace(g, groups=_up(g.groups, alignment))
            in_scale = out_scale = gemm.groups / g.groups
    else:
        gemm = stored = replace(g, k=_up(g.k, alignment), n=_up(g.n, alignment))
        in_scale, out_scale = gemm.k / g.k, gemm.n / g.n
    host_written = bool(kernel.inputs) and all(t in graph.inputs for t in kernel.inputs)
    return replace(
        work, gemm=gemm, input_dram_ratio=1 / in_scale if host_written else 1.0,
        input_elems=math.ceil(work.input_elems * in_scale),
        output_elems=math.ceil(work.output_elems * out_scale),
        weight_elems=math.ceil(work.weight_elems * stored.macs / max(g.macs, 1)),
    )
