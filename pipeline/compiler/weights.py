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


def weight_dram_bytes(decisions: list[Decision], graph: Graph, profile: HardwareProfile,
                       policy: str, free_sram: int) -> tuple[list[int | None], int]:
    """Per kernel, the weight bytes read from DRAM each inference (0: cached on chip; None:
    raw size), and the bytes cached. The cache fills in execution order, as the Edge TPU
    compiler fills its parameter cache; ``policy`` (``compile.memory.weights``) can force
    every weight resident or streamed as a what-if."""
    capacity = {"streamed": 0.0, "resident": math.inf}.get(
        policy, min(profile.weights.cache_kb * 1024, free_sram))
    cached, out = 0, []
    for d in decisions:
        width = WIDTHS.get(d.precision, WIDTHS["fp32"])[1]
        raw, held = d.work.weight_elems * width, d.work.held_weight_elems * width
        if d.target != NPU or raw == 0:
            out.append(None)
        elif cached + held <= capacity:  # a table is cached whole or not at all
            cached += held
            out.append(0)
        else:
            out.append(_streamed_bytes(d, graph, profile, raw))
    return out, cached
