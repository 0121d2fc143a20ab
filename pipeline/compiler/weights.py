"""Weights: which stay in the on-chip cache across inferences, and what the rest cost to
stream.

Written here because it is the compiler's decision (the Edge TPU compiler fills its
parameter cache in execution order; RKNN and Vela's Shared_Sram mode stream every weight
every inference); the compressed size comes from ``hardware.compression``.
"""

from __future__ import annotations

import math

from hardware.compression import entropy_bytes
from hardware.cost import WIDTHS
from hardware.profile import HardwareProfile
from ops.graph import Graph
from pipeline.compiler.placement import NPU, Decision


def _weight_values(d: Decision, graph: Graph) -> list:
    """The kernel's constant operands as arrays (quantized weights are the int8
    initializers once Q/DQ is folded)."""
    values = []
    for node in d.kernel.nodes:
        for name in node.inputs:
            t = graph.tensor(name) if name else None
            if t is not None and t.is_const and t.proto is not None:
                values.append(t.value())
    return values


def stored_weight_bytes(d: Decision, graph: Graph, width: int) -> int:
    """The kernel's constant operands as stored: ``weight_elems`` at the width it computes
    in, except weights narrower than that (weight-only int4: fp16 MACs on int4 weights the
    array dequantizes as it reads them), which are their own packed bytes plus their
    scales (one per output channel, or per group of input rows)."""
    narrow = [t for node in d.kernel.nodes for name in node.inputs if name
              for t in [graph.tensor(name)]
              if t is not None and t.is_const and t.precision == "int4"]
    if not narrow:
        return d.work.weight_elems * width
    rest = max(d.work.weight_elems - sum(t.size for t in narrow), 0)
    return sum(t.nbytes + (t.scale.nbytes if t.scale is not None else 0) for t in narrow) + \
        rest * width


def _streamed_bytes(d: Decision, graph: Graph, profile: HardwareProfile, raw: int
                    ) -> int | None:
    """DRAM bytes of a streamed kernel's weights: their entropy-coded size where the
    profile compresses integer weights (channel padding adds zeros, which cost ~nothing),
    else None (the raw bytes)."""
    if profile.weights.compression != "entropy" or not d.precision.startswith("int"):
        return None
    values = _weight_values(d, graph)
    if not values:
        return None
    return min(raw, sum(entropy_bytes(v) for v in values))


def held_weight_bytes(d: Decision, graph: Graph) -> int:
    """The kernel's weights as the device holds them: as stored (``stored_weight_bytes``)
    plus the rows a lookup never reads (a Gather's table is held whole). The one figure
    for a kernel's weights: the plan's memory, its kernels and a language model's memory
    all read it."""
    width = WIDTHS.get(d.precision, WIDTHS["fp32"])[1]
    return stored_weight_bytes(d, graph, width) + d.work.unread_weight_elems * width


def weight_dram_bytes(decisions: list[Decision], graph: Graph, profile: HardwareProfile,
                      policy: str, free_sram: int, held: list[int]
                      ) -> tuple[list[int | None], int]:
    """Per kernel, the weight bytes read from DRAM each inference (0: cached on chip; None:
    raw size), and the bytes cached (``held``: each kernel's ``held_weight_bytes``). The
    cache fills in execution order, as the Edge TPU compiler fills its parameter cache;
    ``policy`` (``compile.memory.weights``) can force every weight resident or streamed as
    a what-if."""
    capacity = {"streamed": 0.0, "resident": math.inf}.get(
        policy, min(profile.weights.cache_kb * 1024, free_sram))
    cached, out = 0, []
    for d, kept in zip(decisions, held, strict=True):
        width = WIDTHS.get(d.precision, WIDTHS["fp32"])[1]
        raw = kept - d.work.unread_weight_elems * width
        packed = raw != d.work.weight_elems * width  # the cost model must be told the size
        if d.target != NPU or raw == 0:
            out.append(None)
        elif cached + kept <= capacity:  # a table is cached whole or not at all
            cached += kept
            out.append(0)
        else:
            streamed = _streamed_bytes(d, graph, profile, raw)
            out.append(raw if streamed is None and packed else streamed)
    return out, cached
