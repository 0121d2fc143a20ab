"""The host CPU a fallback kernel runs on (``host``: GFLOP/s, memory bandwidth, the time of
one transcendental evaluation on the vendor runtime's fallback path): the slower of its
arithmetic and its bytes (``hardware.host``), expressed in NPU cycles so that every
timeline shares one clock."""

from __future__ import annotations

import math

from hardware import energy as energy_model
from hardware import host as host_model
from hardware.kernel_cost import WIDTHS, KernelCost
from hardware.profile_schema import HardwareProfile
from hardware.units import Operands, Unit, register
from ops.work import FREE, Work


@register
class HostUnit(Unit):
    name = "host"
    lane = "cpu"
    host = True

    @staticmethod
    def runs(work: Work, profile: HardwareProfile, depthwise: bool) -> bool:
        return False  # chosen by placement, never as an NPU unit

    @staticmethod
    def cost(work: Work, precision: str, profile: HardwareProfile, where: Operands
             ) -> KernelCost:
        act_w, wt_w, _ = WIDTHS[precision]
        nbytes = (work.input_elems + work.output_elems) * act_w + work.weight_elems * wt_w
        if work.unit == FREE:
            nbytes = 0
        hz = profile.frequency_mhz * 1e6
        arithmetic = math.ceil(host_model.arithmetic_seconds(
            work.flops, profile.host, work.transcendentals) * hz)
        memory = math.ceil(host_model.memory_seconds(nbytes, profile.host) * hz)
        return KernelCost(  # the roofline (hardware.host.host_seconds), in whole cycles
            unit="host", precision=precision, macs=work.macs, compute_cycles=arithmetic,
            memory_cycles=memory, overhead_cycles=0, total_cycles=max(arithmetic, memory),
            dram_bytes=nbytes, compulsory_dram_bytes=nbytes, sram_bytes=0,
            energy_pj=energy_model.dynamic_energy_pj(0, precision, 0, nbytes,
                                                     profile.energy),
        )
