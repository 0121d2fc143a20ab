"""A kernel's work and precision, and its channel-aligned form on the NPU.

A fused kernel's arithmetic is its anchor's; epilogue ops (bias, BN, activation, residual
add) run in the array's output pipeline at the rate outputs leave it, so they add no
compute cycles (except a lookup-table activation, which the cost model charges at the
profile's ``epilogue.lut_elements_per_cycle``), and their intermediates never leave the
kernel, so they add no bytes.
Only the kernel's external inputs and outputs are read and written.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hardware.channel_padding import pad_gemm
from hardware.dilation import expanded_taps
from ops.activation import OPS_PER_ELEMENT, TRANSCENDENTALS
from ops.conv_lowering import Lowering, run_outputs
from ops.elementwise import INTEGER_OPS_PER_ELEMENT
from ops.graph import Graph
from ops.norm import NORM_OPS
from ops.quant import node_precision
from ops.reduce import spatial_mean
from ops.registry import work_of
from ops.work import ARRAY, FREE, MEMORY, VECTOR, GemmShape, HostInput, Work, reduction_of
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


def kernel_work(kernel: Kernel, graph: Graph, precision: str = "fp32",
                lut_activations: frozenset[str] = frozenset()) -> Work:
    """``lut_activations``: the profile's ``epilogue.lut_activations``; an array kernel
    whose epilogue applies one of them is marked (``Work.lut_activation``)."""
    works = [work_of(n, graph) for n in kernel.nodes]
    consts = sum(w.weight_elems for w in works)
    unread = sum(w.unread_weight_elems for w in works)
    ins = sum(graph.tensors[t].size for t in kernel.inputs)
    outs = sum(graph.tensors[t].size for t in kernel.outputs)
    transcendentals = sum(w.transcendentals for w in works)
    anchor = works[0]
    if anchor.unit == ARRAY:
        return Work(ARRAY, macs=anchor.macs, input_elems=ins, weight_elems=consts,
                    output_elems=outs, gemm=anchor.gemm,
                    lut_activation=kernel.activation in lut_activations,
                    transcendentals=transcendentals)
    if kernel.composite:
        per = OPS_PER_ELEMENT.get(kernel.composite) or NORM_OPS.get(kernel.composite, 4)
        return Work(VECTOR, vector_ops=per * outs, input_elems=ins, weight_elems=consts,
                    output_elems=outs,
                    transcendentals=TRANSCENDENTALS.get(kernel.composite, 0) * outs,
                    reduction=reduction_of(kernel.composite))
    units = {w.unit for w in works}
    unit = VECTOR if VECTOR in units else MEMORY if MEMORY in units else FREE
    return Work(unit, vector_ops=sum(w.vector_ops for w in works)
                + _integer_extra_ops(kernel, graph, precision), input_elems=ins,
                weight_elems=consts, output_elems=outs, unread_weight_elems=unread,
                transcendentals=transcendentals,
                reduction=works[0].reduction if len(works) == 1 else "")


def lowered(work: Work, kernel: Kernel, graph: Graph, lowering: Lowering) -> Work:
    """A convolution as the compiler rewrote it (``ops.conv_lowering``): the array computes
    the output grid at the run stride (``macs`` stays the useful count), and the extra
    passes move bytes: each kernel part reads its slice (Slice writes it, the part reads
    it) and all but the first read and write a partial sum; a run stride's grid is written
    and read back by the 1x1 select that keeps its every few outputs; space-to-depth reads
    and writes the input once."""
    if not lowering.rewritten or work.gemm is None:
        return work
    node = kernel.anchor
    n, cout = graph.tensors[node.inputs[0]].shape[0], graph.tensors[node.outputs[0]].shape[1]
    grid = run_outputs(node, graph, lowering)
    run_m = n * math.prod(grid)
    x = graph.tensors[node.inputs[0]].size
    reads = writes = 0
    if lowering.space_to_depth:
        reads, writes = x, x
    if lowering.parts > 1:
        reads += 2 * lowering.parts * x
        writes += lowering.parts * x
    partial = cout * run_m
    if lowering.run_strides:  # every part's grid written, read back by its select
        reads += lowering.parts * partial
        writes += lowering.parts * partial
        partial = work.output_elems
    reads += (lowering.parts - 1) * partial  # the sums
    writes += (lowering.parts - 1) * partial
    return replace(work, gemm=replace(work.gemm, m=run_m, width=grid[-1]),
                   input_elems=work.input_elems + reads,
                   output_elems=work.output_elems + writes)


def host_written(kernel: Kernel, graph: Graph) -> bool:
    """Whether every input of the kernel is one the host wrote (a graph input)."""
    return bool(kernel.inputs) and all(t in graph.inputs for t in kernel.inputs)


def host_input(work: Work, kernel: Kernel, graph: Graph) -> Work:
    """A convolution reading an input the host wrote records that input's channels and its
    kernel's taps (``Work.host_input``): the host leaves it unpadded and channels-last in
    DRAM, so its pixels are runs of that many elements."""
    node = kernel.anchor
    if node.op_type != "Conv" or work.gemm is None or not host_written(kernel, graph):
        return work
    weights = graph.tensors[node.inputs[1]].shape
    return replace(work, host_input=HostInput(channels=graph.tensors[node.inputs[0]].shape[1],
                                              taps=math.prod(weights[2:])))


def aligned(work: Work, kernel: Kernel, graph: Graph, alignment: int, tap_channels: int = 0,
            lowering: Lowering | None = None, kernel_first_taps: int = 0) -> Work:
    """Pad channels to the NPU's multiple (``hardware.channel_padding``): the GEMM (so
    compute cycles) and the bytes grow; ``macs`` stays the useful count, so utilization
    shows the waste. Inputs the host wrote (graph inputs) stay unpadded in DRAM: the
    padding happens as the NPU loads them, so their DRAM bytes are the tensors' own
    (``input_dram_ratio``). A convolution lowered to space-to-depth reads Cin x k x k
    contiguous channels in one tap."""
    if (alignment <= 1 and tap_channels <= 1 and not kernel_first_taps) or work.gemm is None:
        return work
    g = work.gemm
    cin = graph.tensors[kernel.anchor.inputs[0]].shape[1] \
        if kernel.anchor.op_type == "Conv" else None
    if cin is not None and lowering is not None and lowering.space_to_depth:
        cin = g.k
    padded = pad_gemm(g, alignment, tap_channels, cin, kernel_first_taps)
    return replace(
        work, gemm=padded.computed,
        input_dram_ratio=1 / padded.input_scale if host_written(kernel, graph) else 1.0,
        input_elems=math.ceil(work.input_elems * padded.input_scale),
        output_elems=math.ceil(work.output_elems * padded.output_scale),
        weight_elems=math.ceil(work.weight_elems * padded.stored.macs / max(g.macs, 1)),
    )


def dilated(work: Work, kernel: Kernel, graph: Graph, hardware_dilation: int) -> Work:
    """A convolution dilated beyond what the array does itself, run as the zero-dilated
    kernel (``hardware.dilation``): the GEMM's taps and the stored weights grow; ``macs``
    stays the useful count."""
    anchor = kernel.anchor
    if anchor.op_type != "Conv" or work.gemm is None or not hardware_dilation:
        return work
    w = graph.tensors[anchor.inputs[1]].shape
    taps = tuple(int(k) for k in w[2:])
    dilations = tuple(int(d) for d in anchor.attrs.get("dilations") or [1] * len(taps))
    grown = expanded_taps(taps, dilations, hardware_dilation)
    if grown == taps:
        return work
    scale = math.prod(grown) / math.prod(taps)
    return replace(work, gemm=replace(work.gemm, k=round(work.gemm.k * scale)),
                   weight_elems=math.ceil(work.weight_elems * scale))


def mean_on_engine(work: Work, kernel: Kernel, graph: Graph, on_engine: bool) -> Work:
    """A spatial mean as the depthwise convolution an engine with ``spatial_means`` runs
    (Vela's convert_mean_to_depthwise_conv): one output pixel per channel, the whole map
    as its taps."""
    shape = spatial_mean(kernel.anchor, graph) if on_engine else None
    if shape is None:
        return work
    n, c, pixels = shape
    gemm = GemmShape(m=n, k=pixels, n=1, groups=c, width=1)
    return Work(ARRAY, macs=gemm.macs, input_elems=work.input_elems,
                weight_elems=work.weight_elems, output_elems=work.output_elems, gemm=gemm)


def concat_in_place(work: Work, kernel: Kernel, graph: Graph, in_place: bool) -> Work:
    """A Concat whose inputs are written into their slices of its output (the profile's
    ``concat_in_place``, Vela's). Only an input computed for the Concat alone can be: its
    producer writes straight into the slice. An input something else also reads (a U-Net's
    skip connection, which the encoder pools), a graph input or a constant is copied into
    its slice (Vela 5.2 regor ``GraphIrOptimiser::RewriteConcat``: one MemoryCopy per
    input, the copy dropped where the producer writes in place; Vela's Python back end
    likewise: the U55's per-layer report charges the skip input's copy). With nothing to
    copy no kernel runs."""
    node = kernel.anchor
    if not in_place or node.op_type != "Concat" or len(kernel.nodes) != 1:
        return work
    producers, consumers = graph.producers(), graph.consumers()
    tensors = [graph.tensors[name] for name in node.inputs
               if name and (name not in producers or name in graph.outputs
                            or len(consumers.get(name, [])) > 1)]
    if not tensors:
        return replace(work, unit=FREE, vector_ops=0)
    copied = sum(t.size for t in tensors)
    return replace(work, input_elems=copied, output_elems=copied, weight_elems=0,
                   copied=tuple(_pixels_channels(t.shape) for t in tensors))


def _pixels_channels(shape: tuple[int, ...]) -> tuple[int, int]:
    """A tensor as (pixels, channels): NCHW's channels are its second axis."""
    if not shape:
        return 0, 1
    channels = shape[1] if len(shape) > 1 else 1
    return math.prod(shape) // max(channels, 1), channels
