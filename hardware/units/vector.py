"""The vector unit (``vector_unit``: lanes, output bytes per cycle, chains): elementwise,
pooling, normalisation and reduction passes, and a depthwise convolution on profiles that
run it here (``mac_array.depthwise.unit: vector``, each MAC one lane-op); its time is
``hardware.vector.vector_cycles``. Its operands' DMA overlaps that time where the NPU's
DMA overlaps its compute (``dma.double_buffering``), and is added to it where the NPU
loads a layer's operands, then computes, as the RK3588's and RK3566/68's boards do for
every layer (a standalone elementwise layer is one of their layers; the RK3576's
PP-OCRv4 det, 77 such layers, runs its elementwise rest in 0.7x the RK3588's time on a
DRAM a third as fast, as overlapped passes would)."""

from __future__ import annotations

import math

from hardware.kernel_cost import WIDTHS, KernelCost
from hardware.profile_schema import HardwareProfile
from hardware.profile_schema import VectorUnit as VectorUnitSpec
from hardware.units import Operands, Unit, register, streamed
from hardware.vector import vector_cycles
from ops.work import ARRAY, VECTOR, Work


def reduction_rate(kind: str, unit: VectorUnitSpec) -> float:
    """Elements per cycle a reducing pass of ``kind`` retires (0: no rate of its own)."""
    return {"norm": unit.norm_elements_per_cycle,
            "softmax": unit.softmax_elements_per_cycle}.get(kind, 0.0)


@register
class VectorUnit(Unit):
    name = "vector"
    lane = "npu.vector"

    @staticmethod
    def runs(work: Work, profile: HardwareProfile, depthwise: bool) -> bool:
        return work.unit == VECTOR or (work.unit == ARRAY and depthwise
                                       and profile.mac_array.depthwise.unit == "vector")

    @staticmethod
    def cost(work: Work, precision: str, profile: HardwareProfile, where: Operands
             ) -> KernelCost:
        ops = work.vector_ops + (work.macs if work.unit == ARRAY else 0)
        width = 1 if profile.vector_unit.output_counts == "element" else WIDTHS[precision][0]
        compute = vector_cycles(ops, work.output_elems * width, profile.vector_unit)
        rate = reduction_rate(work.reduction, profile.vector_unit)
        if rate > 0:
            compute = max(compute, math.ceil(work.output_elems / rate))
        return streamed(work, precision, profile, where, VECTOR, compute,
                        pipelined=profile.dma.double_buffering)
