"""A depthwise engine (``mac_array.depthwise`` with ``unit: engine``: Ethos-U's depthwise
micro-blocks, the RKNPU's depthwise path): its cycles and efficiency are
``hardware.depthwise``'s; it loads its operands as the array does, so
``dma.double_buffering`` decides whether their DMA overlaps its compute. Its time is drawn
on the array's lane, whose hardware it shares."""

from __future__ import annotations

from hardware.depthwise import engine_cycles, engine_efficiency, engine_rate
from hardware.kernel_cost import KernelCost
from hardware.profile_schema import HardwareProfile
from hardware.units import FEATURE_MAPS, Operands, Unit, register, streamed
from ops.work import ARRAY, Work


@register
class DepthwiseEngine(Unit):
    name = "depthwise_engine"
    lane = "npu.array"

    @staticmethod
    def runs(work: Work, profile: HardwareProfile, depthwise: bool) -> bool:
        return work.unit == ARRAY and depthwise and \
            profile.mac_array.depthwise.unit == "engine"

    @staticmethod
    def cost(work: Work, precision: str, profile: HardwareProfile, where: Operands
             ) -> KernelCost:
        assert work.gemm is not None
        mode = profile.mac_array.depthwise
        compute = engine_cycles(work.gemm, mode,
                                engine_rate(mode, profile.mac_array.throughput, precision))
        # reported as the array's: the plan's readers count it as array time
        return streamed(work, precision, profile, where, ARRAY, compute,
                        engine_efficiency(work.gemm, mode),
                        pipelined=profile.dma.double_buffering, reads=FEATURE_MAPS)
