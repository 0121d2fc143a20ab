"""Data movement (Concat, Slice, Transpose, Pad, ...): a copy of the output through the
SRAM port (``hardware.vector.copy_cycles`` at ``sram.bandwidth_bytes_per_cycle``), streamed
with its DMA."""

from __future__ import annotations

from hardware.kernel_cost import WIDTHS, KernelCost
from hardware.profile_schema import HardwareProfile
from hardware.units import Operands, Unit, register, streamed
from hardware.vector import copy_cycles
from ops.work import MEMORY, Work


@register
class CopyUnit(Unit):
    name = "memory"
    lane = "npu.vector"

    @staticmethod
    def runs(work: Work, profile: HardwareProfile, depthwise: bool) -> bool:
        return work.unit == MEMORY

    @staticmethod
    def cost(work: Work, precision: str, profile: HardwareProfile, where: Operands
             ) -> KernelCost:
        compute = copy_cycles(work.output_elems * WIDTHS[precision][0],
                              profile.sram.bandwidth_bytes_per_cycle)
        return streamed(work, precision, profile, where, MEMORY, compute)
