"""The vector unit (``vector_unit``: lanes, output bytes per cycle, chains): elementwise,
pooling, normalisation and reduction passes, and a depthwise convolution on profiles that
run it here (``mac_array.depthwise.unit: vector``, each MAC one lane-op); its time is
``hardware.vector.vector_cycles``, streamed with its operands' DMA."""

from __future__ import annotations

from hardware.kernel_cost import WIDTHS, KernelCost
from hardware.profile_schema import HardwareProfile
from hardware.units import Operands, Unit, register, streamed
from hardware.vector import vector_cycles
from ops.work import ARRAY, VECTOR, Work


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
        return streamed(work, precision, profile, where, VECTOR, compute)
