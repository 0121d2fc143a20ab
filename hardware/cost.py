"""One kernel's cost on the NPU or the host: cycles, bytes per memory level, energy.

This composes the unit models (``systolic``, ``vector``, ``memory``, ``host``, ``energy``)
for the :class:`~ops.work.Work` an op spec reports. ``compute_cycles`` is the MAC-array or
vector-unit time with ideal memory; ``memory_cycles`` the DMA time of the DRAM traffic the
tiling implies; ``total_cycles`` combines them (overlapped with double buffering) and adds
the kernel launch. Every operand byte also crosses the SRAM port once, so a kernel never
beats its external bytes / SRAM bandwidth either (on a micro NPU such as Ethos-U, whose
"SRAM" is system SRAM behind a 64-bit AXI port, that bound decides elementwise passes).
Depthwise convolutions run where the profile's ``mac_array.depthwise`` says
(``hardware/depthwise.py``). Two physical bounds hold by construction and are tested as
properties: total >= MACs / peak MACs per cycle, and total >= compulsory DRAM bytes /
bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hardware import energy as energy_model
from hardware import host as host_model
from hardware.depthwise import engine_cycles, engine_efficiency, engine_rate
from hardware.memory import (
    OperandBytes,
    Tiling,
    gemm_traffic,
    overlap,
    sram_footprint,
    tiled_cycles,
    transfer_cycles,
)
from hardware.profile import HardwareProfile
from hardware.systolic import ComputeEstimate, compute_cycles, sram_accesses
from hardware.tiling import TilingChoice, search
from hardware.vector import copy_cycles, vector_cycles
from ops.work import ARRAY, FREE, MEMORY, VECTOR, GemmShape, Work

# bytes per element of (activations, weights, accumulator) for a kernel precision;
# int16 means A16W8 (16-bit activations, 8-bit weights), as NPUs that offer it run it.
WIDTHS = {"int8": (1, 1, 4), "int16": (2, 1, 4), "fp16": (2, 2, 4), "fp32": (4, 4, 4),
          # types only the host runs (index, mask and double-precision graphs)
          "int32": (4, 4, 4), "int64": (8, 8, 8), "fp64": (8, 8, 8), "bool": (1, 1, 1),
          "bf16": (2, 2, 4)}


@dataclass(frozen=True)
class KernelCost:
    unit: str  # array | vector | memory | free | host
    precision: str
    macs: int
    compute_cycles: int
    memory_cycles: int
    overhead_cycles: int  # dispatch (and, on the host, nothing else)
    total_cycles: int
    dram_bytes: int
    compulsory_dram_bytes: int
    sram_bytes: int  # array/vector-side SRAM traffic
    energy_pj: float  # dynamic energy; static power is charged over the timeline
    mapping_efficiency: float = 1.0
    sram_footprint: int = 0
    weight_dram_bytes: int = 0  # the part of dram_bytes that is weights
    lut_cycles: int = 0  # the part of compute_cycles an output-stage lookup table takes

    @property
    def bound(self) -> str:
        parts = {"compute": self.compute_cycles, "memory": self.memory_cycles,
                 "overhead": self.overhead_cycles}
        return max(parts, key=lambda k: parts[k])


def bytes_per_cycle(profile: HardwareProfile) -> float:
    """DRAM bandwidth in bytes per NPU cycle."""
    return profile.dram.bandwidth_gbps * 1e9 / (profile.frequency_mhz * 1e6)


def latency_cycles(profile: HardwareProfile) -> float:
    return profile.dram.latency_ns * 1e-9 * profile.frequency_mhz * 1e6


def default_tiling(gemm: GemmShape) -> Tiling:
    """Whole-operand tiles: the tiling when SRAM holds everything (compulsory traffic)."""
    return Tiling(gemm.m, gemm.n, gemm.k, "mnk")


def sram_port_cycles(work: Work, precision: str, profile: HardwareProfile) -> int:
    """Every external operand byte (input, weights, output) crosses the SRAM port once."""
    act_w, wt_w, _ = WIDTHS[precision]
    nbytes = (work.input_elems + work.output_elems) * act_w + work.weight_elems * wt_w
    return math.ceil(nbytes / profile.sram.bandwidth_bytes_per_cycle)


def operand_bytes(work: Work, precision: str, a_in_dram: bool, c_to_dram: bool,
                  weight_bytes: int | None) -> OperandBytes:
    """Compulsory DRAM bytes per operand; ``weight_bytes`` overrides the weights' (0 when
    they are resident in SRAM, the compressed size when the profile compresses them)."""
    act_w, wt_w, acc_w = WIDTHS[precision]
    return OperandBytes(
        a=math.ceil(work.input_elems * work.input_dram_ratio) * act_w if a_in_dram else 0,
        b=work.weight_elems * wt_w if weight_bytes is None else weight_bytes,
        c=work.output_elems * act_w if c_to_dram else 0,
        acc_width=acc_w,
        c_elems=work.output_elems,
    )


def array_shape(gemm: GemmShape, profile: HardwareProfile, precision: str
                ) -> tuple[int, int]:
    """The arrangement of the PEs this GEMM runs on: the profile's ``rows`` x ``cols``, or
    among ``mac_array.shapes`` the one with the fewest cycles (the first on a tie)."""
    arr = profile.mac_array
    if not arr.shapes:
        return arr.rows, arr.cols
    rate = getattr(arr.throughput, precision)
    options = [(arr.rows, arr.cols), *((int(r), int(c)) for r, c in arr.shapes)]
    return min(options, key=lambda rc: compute_cycles(gemm, rc[0], rc[1], arr.dataflow,
                                                      rate).cycles)


def array_compute(gemm: GemmShape, profile: HardwareProfile, precision: str
                  ) -> ComputeEstimate:
    """The array's cycles for a GEMM with ideal memory: SCALE-Sim's systolic time, or the
    output stage's if that drains slower. An output stage that takes ``output_per_cycle``
    results per cycle, a group of ``cols`` kernels at a time (NVDLA's SDP after the
    accumulator; RKNN-Toolkit2's rk3588 estimate charges ceil(N / 32) x 4 cycles per output
    pixel whatever the input depth below 4 atoms), needs ceil(N / cols) x cols x M /
    output_per_cycle cycles per group: thin, wide layers (16 -> 32 channels at 240x240, a
    ConvTranspose to one channel) are bound by it, deep ones by the array."""
    arr = profile.mac_array
    rows, cols = array_shape(gemm, profile, precision)
    est = compute_cycles(gemm, rows, cols, arr.dataflow, getattr(arr.throughput, precision))
    if arr.output_per_cycle <= 0:
        return est
    drained = gemm.groups * math.ceil(gemm.n / cols) * cols * gemm.m
    return replace(est, cycles=max(est.cycles, math.ceil(drained / arr.output_per_cycle)))


def _array_cost(work: Work, precision: str, profile: HardwareProfile, tiling: Tiling | None,
                a_in_dram: bool, c_to_dram: bool, weight_bytes: int | None) -> KernelCost:
    assert work.gemm is not None
    gemm = work.gemm
    arr = profile.mac_array
    act_w, wt_w, acc_w = WIDTHS[precision]
    est = array_compute(gemm, profile, precision)
    tiling = tiling or default_tiling(gemm)
    sizes = operand_bytes(work, precision, a_in_dram, c_to_dram, weight_bytes)
    traffic = gemm_traffic(gemm, tiling, sizes)
    memory, body = tiled_cycles(est.cycles, traffic, profile.dma.double_buffering,
                                bytes_per_cycle(profile), latency_cycles(profile),
                                sram_port_cycles(work, precision, profile))
    acc = sram_accesses(gemm, *array_shape(gemm, profile, precision), arr.dataflow)
    sram = acc.ifmap_reads * act_w + acc.filter_reads * wt_w + acc.ofmap_writes * acc_w
    footprint = sram_footprint(tiling, gemm, act_w, wt_w, acc_w, profile.dma.double_buffering)
    return KernelCost(
        unit=ARRAY, precision=precision, macs=work.macs, compute_cycles=est.cycles,
        memory_cycles=memory, overhead_cycles=profile.dispatch_cycles,
        total_cycles=body + profile.dispatch_cycles, dram_bytes=traffic.total,
        compulsory_dram_bytes=sizes.a + sizes.b + sizes.c, sram_bytes=sram,
        energy_pj=energy_model.dynamic_energy_pj(work.macs, precision, sram, traffic.total,
                                                 profile.energy),
        mapping_efficiency=est.mapping_efficiency, sram_footprint=footprint,
        weight_dram_bytes=traffic.b,
    )


def _streaming_cost(work: Work, precision: str, profile: HardwareProfile, a_in_dram: bool,
                    c_to_dram: bool, weight_bytes: int | None, depthwise_engine: bool = False
                    ) -> KernelCost:
    """Vector, copy and depthwise-engine kernels stream their operands once: traffic is
    compulsory. Vector and copy passes are a read DMA -> compute -> write DMA pipeline
    (NVDLA's SDP / PDP in memory-to-memory mode, Ethos-U's elementwise), so their memory
    always overlaps their compute; a depthwise engine loads its operands like the array
    does, so ``dma.double_buffering`` decides for it."""
    act_w, _, _ = WIDTHS[precision]
    sizes = operand_bytes(work, precision, a_in_dram, c_to_dram, weight_bytes)
    dram = sizes.a + sizes.b + sizes.c
    sram = (work.input_elems + work.output_elems) * act_w + sizes.b
    unit, efficiency = work.unit, 1.0
    if work.unit == FREE:
        compute = 0
        dram = sram = 0
    elif work.unit == MEMORY:
        compute = copy_cycles(work.output_elems * act_w, profile.sram.bandwidth_bytes_per_cycle)
    elif depthwise_engine:
        assert work.gemm is not None
        mode = profile.mac_array.depthwise
        compute = engine_cycles(work.gemm, mode,
                                engine_rate(mode, profile.mac_array.throughput, precision))
        efficiency = engine_efficiency(work.gemm, mode)
    else:
        unit = VECTOR
        ops = work.vector_ops + (work.macs if work.unit == ARRAY else 0)
        compute = vector_cycles(ops, work.output_elems * act_w, profile.vector_unit)
    streams = sum(1 for x in (sizes.a, sizes.b, sizes.c) if x)
    memory = transfer_cycles(dram, streams, bytes_per_cycle(profile), latency_cycles(profile))
    dispatch = 0 if work.unit == FREE else profile.dispatch_cycles
    pipelined = profile.dma.double_buffering or not depthwise_engine
    body = overlap(compute, memory, pipelined, memory // max(streams, 1))
    if work.unit != FREE:
        body = max(body, sram_port_cycles(work, precision, profile))
    return KernelCost(
        unit=unit, precision=precision,
        macs=work.macs, compute_cycles=compute,
        memory_cycles=memory, overhead_cycles=dispatch, total_cycles=body + dispatch,
        dram_bytes=dram, compulsory_dram_bytes=dram, sram_bytes=sram,
        energy_pj=energy_model.dynamic_energy_pj(work.macs, precision, sram, dram,
                                                 profile.energy),
        mapping_efficiency=efficiency, weight_dram_bytes=sizes.b if dram else 0,
    )


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
    return replace(lockstep, total_cycles=total)


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
    return search(g.m, g.n, g.k, g.groups, sizes, act_w, wt_w, acc_w, budget,
                  profile.dma.double_buffering, bytes_per_cycle(profile),
                  latency_cycles(profile), est.cycles, objective,
                  profile.energy.dram_pj_per_byte,
                  floor_cycles=sram_port_cycles(work, precision, profile))


def npu_kernel_cost(work: Work, precision: str, profile: HardwareProfile,
                    tiling: Tiling | None = None, a_in_dram: bool = True,
                    c_to_dram: bool = True, depthwise: bool = False,
                    weight_bytes: int | None = None) -> KernelCost:
    """Cost of one kernel on the NPU. ``a_in_dram`` / ``c_to_dram`` say whether the input
    is read from / the output written to DRAM (False when the compiler keeps it in SRAM);
    ``depthwise`` marks a depthwise convolution, which runs where
    ``mac_array.depthwise.unit`` says; ``weight_bytes`` overrides the weights' DRAM bytes
    (0: resident in SRAM; compressed size)."""
    if precision not in WIDTHS:
        raise ValueError(f"unknown precision {precision!r}")
    unit = profile.mac_array.depthwise.unit if depthwise else "array"
    if work.unit == ARRAY and unit == "array":
        cost = _array_cost(work, precision, profile, tiling, a_in_dram, c_to_dram,
                           weight_bytes)
    else:
        cost = _streaming_cost(work, precision, profile, a_in_dram, c_to_dram, weight_bytes,
                               depthwise_engine=work.unit == ARRAY and unit == "engine")
    return _through_lut(cost, work, profile)


def _through_lut(cost: KernelCost, work: Work, profile: HardwareProfile) -> KernelCost:
    """A lookup-table activation in the output stage (``epilogue.lut_activations``) takes
    ``lut_elements_per_cycle`` results per cycle once the convolution has produced them:
    ceil(outputs / rate) cycles on top of the kernel's. Added, not overlapped, because the
    boards say so: rknn_model_zoo's yolov5s and yolov5s_relu have the same RKNN-Toolkit2
    estimate (it costs ConvExSwish as a plain convolution), yet the board takes 5.5 ms
    longer with SiLU on the RK3588 and 12.6 ms on the RK3566/68."""
    if not work.lut_activation or work.unit != ARRAY:
        return cost
    extra = math.ceil(work.output_elems / profile.epilogue.lut_elements_per_cycle)
    return replace(cost, compute_cycles=cost.compute_cycles + extra,
                   total_cycles=cost.total_cycles + extra, lut_cycles=extra)


def host_kernel_cost(work: Work, profile: HardwareProfile, precision: str = "fp32"
                     ) -> KernelCost:
    """A kernel on the fallback CPU, expressed in NPU cycles so timelines share one clock."""
    act_w, wt_w, _ = WIDTHS[precision]
    nbytes = (work.input_elems + work.output_elems) * act_w + work.weight_elems * wt_w
    if work.unit == FREE:
        nbytes = 0
    hz = profile.frequency_mhz * 1e6
    seconds = host_model.host_seconds(work.flops, nbytes, profile.host)
    arithmetic = math.ceil(work.flops / (profile.host.gflops * 1e9) * hz)
    memory = math.ceil(nbytes / (profile.host.bandwidth_gbps * 1e9) * hz)
    cycles = max(arithmetic, memory, math.ceil(seconds * hz))
    return KernelCost(
        unit="host", precision=precision, macs=work.macs, compute_cycles=arithmetic,
        memory_cycles=memory, overhead_cycles=0, total_cycles=cycles,
        dram_bytes=nbytes, compulsory_dram_bytes=nbytes, sram_bytes=0,
        energy_pj=energy_model.dynamic_energy_pj(0, precision, 0, nbytes, profile.energy),
    )
