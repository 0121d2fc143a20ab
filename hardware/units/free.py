"""Views (Reshape, Flatten, Squeeze, ...): metadata only; nothing computes, moves or is
dispatched. The DMA latency of the streams a copy would open is still charged, as the
plan always has (the compilers fold most views away; the few left cost a descriptor)."""

from __future__ import annotations

from hardware.kernel_cost import KernelCost
from hardware.profile_schema import HardwareProfile
from hardware.units import Operands, Unit, register, streamed
from ops.work import FREE, Work


@register
class FreeUnit(Unit):
    name = "free"
    lane = "npu.vector"

    @staticmethod
    def runs(work: Work, profile: HardwareProfile, depthwise: bool) -> bool:
        return work.unit == FREE

    @staticmethod
    def cost(work: Work, precision: str, profile: HardwareProfile, where: Operands
             ) -> KernelCost:
        return streamed(work, precision, profile, where, FREE, 0, moves=False)
