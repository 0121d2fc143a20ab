"""The MAC array (``mac_array``: rows x cols PEs, dataflow, throughput per precision,
alternative ``shapes``, the output stage's drain rate): a tiled GEMM whose compute is
SCALE-Sim's systolic time (``hardware.systolic``) and whose memory time is the tiling's
DRAM traffic (``hardware.memory``), overlapped as ``dma.double_buffering`` allows and never
under the SRAM port's time."""

from __future__ import annotations

from hardware import energy as energy_model
from hardware.kernel_cost import (
    WIDTHS,
    KernelCost,
    array_compute,
    array_shape,
    default_tiling,
    gemm_bytes_per_cycle,
    latency_cycles,
    operand_bytes,
    overlaps_dma,
    sram_port_cycles,
)
from hardware.memory import gemm_traffic, sram_footprint, tiled_cycles
from hardware.profile_schema import HardwareProfile
from hardware.systolic import sram_accesses
from hardware.units import FEATURE_MAPS, Operands, Unit, dram_channels, register
from ops.work import ARRAY, Work


@register
class ArrayUnit(Unit):
    name = "array"
    lane = "npu.array"

    @staticmethod
    def runs(work: Work, profile: HardwareProfile, depthwise: bool) -> bool:
        return work.unit == ARRAY and (not depthwise
                                       or profile.mac_array.depthwise.unit == "array")

    @staticmethod
    def cost(work: Work, precision: str, profile: HardwareProfile, where: Operands
             ) -> KernelCost:
        assert work.gemm is not None
        gemm = work.gemm
        arr = profile.mac_array
        act_w, wt_w, acc_w = WIDTHS[precision]
        est = array_compute(gemm, profile, precision)
        tiling = where.tiling or default_tiling(gemm)
        sizes = operand_bytes(work, precision, where.a_in_dram, where.c_to_dram,
                              where.weight_bytes)
        traffic = gemm_traffic(gemm, tiling, sizes)
        channels = dram_channels(profile, FEATURE_MAPS, work, precision)
        streamed = overlaps_dma(gemm, profile)
        memory, body = tiled_cycles(est.cycles, traffic, streamed,
                                    gemm_bytes_per_cycle(gemm.m, profile), latency_cycles(profile),
                                    sram_port_cycles(work, precision, profile, channels),
                                    channels)
        acc = sram_accesses(gemm, *array_shape(gemm, profile, precision), arr.dataflow)
        sram = acc.ifmap_reads * act_w + acc.filter_reads * wt_w + acc.ofmap_writes * acc_w
        footprint = sram_footprint(tiling, gemm, act_w, wt_w, acc_w, streamed)
        return KernelCost(
            unit=ARRAY, precision=precision, macs=work.macs, compute_cycles=est.cycles,
            memory_cycles=memory, overhead_cycles=profile.dispatch_cycles,
            total_cycles=body + profile.dispatch_cycles, dram_bytes=traffic.total,
            compulsory_dram_bytes=sizes.a + sizes.b + sizes.c, sram_bytes=sram,
            energy_pj=energy_model.dynamic_energy_pj(work.macs, precision, sram,
                                                     traffic.total, profile.energy),
            mapping_efficiency=est.mapping_efficiency, sram_footprint=footprint,
            weight_dram_bytes=traffic.b,
        )
