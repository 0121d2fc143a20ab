"""One kernel's cost on the NPU or the host: cycles, bytes per memory level, energy.

The execution unit that runs a kernel prices it (``hardware/units/``: the MAC array, the
vector unit, the depthwise engine, copies, views, the host; each its own module with its
formula's sources), and each output stage (a lookup-table activation) adds its time.
``compute_cycles`` is the unit's time with ideal memory; ``memory_cycles`` the DMA time
of the DRAM traffic the tiling implies; ``total_cycles`` combines them (overlapped with
double buffering) and adds the kernel launch. Every operand byte also crosses the SRAM
port once, so a kernel never beats its external bytes / SRAM bandwidth either (on a micro
NPU such as Ethos-U, whose "SRAM" is system SRAM behind a 64-bit AXI port, that bound
decides elementwise passes). Two physical bounds hold by construction and are tested as
properties: total >= MACs / peak MACs per cycle, and total >= compulsory DRAM bytes /
bandwidth. This module also holds what spans units: the tiler's entry (``auto_tiling``)
and how cores share the DRAM port (``staggered_cores``).
"""

from __future__ import annotations

from dataclasses import replace

from hardware.kernel_cost import (  # re-exported: the names callers price kernels with
    WIDTHS,
    KernelCost,
    array_compute,
    array_shape,
    bytes_per_cycle,
    default_tiling,
    gemm_bytes_per_cycle,
    latency_cycles,
    operand_bytes,
    overlaps_dma,
    sram_port_cycles,
)
from hardware.memory import Tiling
from hardware.profile_schema import HardwareProfile
from hardware.tiling import TilingChoice, search
from hardware.units import (
    FEATURE_MAPS,
    Operands,
    dram_channels,
    host_unit,
    output_stages,
    unit_for,
)
from ops.work import Work

__all__ = ["WIDTHS", "KernelCost", "array_compute", "array_shape", "auto_tiling",
           "bytes_per_cycle", "default_tiling", "gemm_bytes_per_cycle", "host_kernel_cost",
           "latency_cycles", "npu_kernel_cost", "operand_bytes", "sram_port_cycles",
           "staggered_cores"]


def staggered_cores(lockstep: KernelCost, alone: KernelCost) -> KernelCost:
    """One core's time when every core runs its share and the DRAM port is shared.

    ``lockstep`` prices the share with 1/cores of the bandwidth: every core fetching at
    once. Cores whose fetches do not overlap their compute (no double buffering) fall out
    of step, and a core that fetches while the others compute has the port to itself. The
    asymptotic bounds of a closed system (Lazowska et al., *Quantitative System
    Performance*, 1984, ch. 5: throughput <= min(N / (D + Z), 1 / D_max)) then give a
    share's time as the larger of one core alone (``alone``: compute + its bytes at the
    full bandwidth) and the port busy with all cores' bytes (``lockstep.memory_cycles``);
    never more than lockstep. Double-buffered cores already overlap their fetches with
    compute, so they keep the lockstep cost."""
    port = lockstep.memory_cycles + lockstep.overhead_cycles
    total = min(lockstep.total_cycles, max(alone.total_cycles, port))
    return lockstep if total == lockstep.total_cycles else replace(lockstep, total_cycles=total)


def auto_tiling(work: Work, precision: str, profile: HardwareProfile,
                objective: str = "cycles", a_in_dram: bool = True, c_to_dram: bool = True,
                sram_bytes: int | None = None, weight_bytes: int | None = None
                ) -> TilingChoice:
    """The best tiling of an array kernel within the SRAM budget (default: all of it)."""
    assert work.gemm is not None
    g = work.gemm
    act_w, wt_w, acc_w = WIDTHS[precision]
    est = array_compute(g, profile, precision)
    sizes = operand_bytes(work, precision, a_in_dram, c_to_dram, weight_bytes)
    budget = int(profile.sram.size_kb * 1024) if sram_bytes is None else sram_bytes
    channels = dram_channels(profile, FEATURE_MAPS, work, precision)
    return search(g.m, g.n, g.k, g.groups, sizes, act_w, wt_w, acc_w, budget,
                  overlaps_dma(g, profile), gemm_bytes_per_cycle(g.m, profile),
                  latency_cycles(profile), est.cycles, objective,
                  profile.energy.dram_pj_per_byte,
                  floor_cycles=sram_port_cycles(work, precision, profile, channels),
                  channels=channels)


def npu_kernel_cost(work: Work, precision: str, profile: HardwareProfile,
                    tiling: Tiling | None = None, a_in_dram: bool = True,
                    c_to_dram: bool = True, depthwise: bool = False,
                    weight_bytes: int | None = None) -> KernelCost:
    """Cost of one kernel on the NPU: the execution unit that runs it
    (``hardware.units.unit_for``: the array, the vector unit, the depthwise engine, a copy,
    a view) prices it, then each output stage adds its time. ``a_in_dram`` / ``c_to_dram``
    say whether the input is read from / the output written to DRAM (False when the
    compiler keeps it in SRAM); ``depthwise`` marks a depthwise convolution, which runs
    where ``mac_array.depthwise.unit`` says; ``weight_bytes`` overrides the weights' DRAM
    bytes (0: resident in SRAM; compressed size)."""
    if precision not in WIDTHS:
        raise ValueError(f"unknown precision {precision!r}")
    where = Operands(a_in_dram, c_to_dram, weight_bytes, tiling)
    cost = unit_for(work, profile, depthwise).cost(work, precision, profile, where)
    for stage in output_stages():
        cost = stage.after(cost, work, profile)
    return cost


def host_kernel_cost(work: Work, profile: HardwareProfile, precision: str = "fp32"
                     ) -> KernelCost:
    """A kernel on the fallback CPU, expressed in NPU cycles so timelines share one clock."""
    return host_unit().cost(work, precision, profile, Operands())
