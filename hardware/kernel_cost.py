"""What every execution unit prices a kernel with: the operand widths, the cost record,
the DRAM and SRAM rates in cycles, and the MAC array's own compute time (the array unit
and the tiler both need it). Its own module so that the units (``hardware/units/``) and
``hardware.cost``, which picks among them, import it without importing each other."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hardware.memory import Channels, OperandBytes, Tiling
from hardware.profile_schema import HardwareProfile, WeightDecode
from hardware.systolic import ComputeEstimate, compute_cycles
from ops.work import GemmShape, Work

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


def is_matvec(rows: int, profile: HardwareProfile) -> bool:
    """Whether a GEMM of ``rows`` rows (its M) is a matrix-vector product:
    ``mac_array.matvec_rows`` rows or fewer, which the array streams through each weight
    fold (``matvec_compute``)."""
    return 0 < rows <= profile.mac_array.matvec_rows


def gemm_bytes_per_cycle(rows: int, profile: HardwareProfile) -> float:
    """The DRAM rate the traffic of a GEMM of ``rows`` rows moves at, in bytes per NPU
    cycle: a matrix-vector product's at ``dram.stream_gbps`` (its weights are one
    sequential read), every other GEMM's at ``dram.bandwidth_gbps``. A stream is never
    slower than tiles: a what-if that raises the tile rate past the stream rate raises
    both."""
    tiles = bytes_per_cycle(profile)
    if is_matvec(rows, profile):
        return max(tiles, profile.dram.stream_gbps * 1e9 / (profile.frequency_mhz * 1e6))
    return tiles


def latency_cycles(profile: HardwareProfile) -> float:
    return profile.dram.latency_ns * 1e-9 * profile.frequency_mhz * 1e6


def default_tiling(gemm: GemmShape) -> Tiling:
    """Whole-operand tiles: the tiling when SRAM holds everything (compulsory traffic)."""
    return Tiling(gemm.m, gemm.n, gemm.k, "mnk")


def sram_port_cycles(work: Work, precision: str, profile: HardwareProfile,
                     channels: Channels | None = None) -> int:
    """Every external operand byte (input, weights, output) crosses the SRAM port once;
    with ``channels``, each stream also at most at its SRAM channel's rate (the input and
    the weights each a read stream, the output a write stream)."""
    act_w, wt_w, _ = WIDTHS[precision]
    reads, weights = work.input_elems * act_w, work.weight_elems * wt_w
    writes = work.output_elems * act_w
    cycles = (reads + weights + writes) / profile.sram.bandwidth_bytes_per_cycle
    if channels is not None:
        cycles = max(cycles, max(reads, weights) / channels.sram_read,
                     writes / channels.sram_write)
    return math.ceil(cycles)


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


def overlaps_dma(gemm: GemmShape, profile: HardwareProfile) -> bool:
    """Whether a GEMM's DRAM traffic streams behind its compute: where the DMA is double
    buffered, and for a matrix-vector product (``matvec_rows`` rows or fewer) where the
    profile says so (``dma.matvec_overlap``): its weights stream through once and its
    activations are a few rows. RKNN-Toolkit2's
    estimate of a fully connected layer is max(DDR, NPU) cycles (``fc_m*``, ``fc_4096``),
    and a decode step on the RK3588 boards reads its weights at 20-31 GB/s with the
    compute hidden (rknn-llm's benchmark.md), where the profile's convolutions take DDR
    plus NPU as those boards do for them."""
    return profile.dma.double_buffering or (profile.dma.matvec_overlap
                                            and is_matvec(gemm.m, profile))


def matvec_compute(gemm: GemmShape, rows: int, cols: int, matvec_rows: int,
                   throughput: float) -> ComputeEstimate:
    """A matrix-vector product on an array that streams ``matvec_rows`` rows through each
    rows x cols weight fold whatever fewer it is given, the next fold's weights loading
    behind it: ``groups x folds x matvec_rows / throughput`` cycles. RKNN-Toolkit2 2.5's
    estimate of a 1024 x 1024 fully connected layer on the RK3588 is 16,384 NPU cycles for
    1 to 16 rows (1,024 folds of 16 cycles) and 32,768 at 32 rows, twice that in fp16
    (benchmarks/rknn_layers.py, probes fc_m*): no per-fold fill, and a floor of 16 rows."""
    k_folds, n_folds = math.ceil(gemm.k / rows), math.ceil(gemm.n / cols)
    folds = k_folds * n_folds
    cycles = gemm.groups * folds * math.ceil(matvec_rows / throughput)
    useful = gemm.m * gemm.k * gemm.n / (folds * rows * cols * matvec_rows)
    return ComputeEstimate(cycles=cycles, folds=folds, mapping_efficiency=useful)


def weight_decode_cycles(gemm: GemmShape, decode: WeightDecode) -> int:
    """The weight decoder's floor (``mac_array.weight_decode``): ``cycles`` per block of
    ``pixels`` output pixels, ``ofm_channels`` outputs and ``ifm_channels`` of the GEMM's
    depth (the input slices and kernel taps counted together)."""
    if decode.cycles <= 0:
        return 0
    return (decode.cycles * gemm.groups * math.ceil(gemm.m / decode.pixels)
            * math.ceil(gemm.n / decode.ofm_channels) * math.ceil(gemm.k / decode.ifm_channels))


# array_compute's answers by (the array section's identity, GEMM, precision): the section
# kept beside its answer, so an id a freed section's successor reuses never matches
_COMPUTED: dict[tuple[int, GemmShape, str], tuple[object, ComputeEstimate]] = {}
_COMPUTED_MAX = 1 << 16


def array_compute(gemm: GemmShape, profile: HardwareProfile, precision: str
                  ) -> ComputeEstimate:
    """``array_estimate``, remembered per ``mac_array`` section: it reads nothing else of
    the profile, and the tiler, the cost and every evaluator point or sweep job that keeps
    the section (a clock or bandwidth what-if replaces other sections) ask it again for the
    same GEMM. Profiles are frozen values, so the section's identity is its value."""
    arr = profile.mac_array
    key = (id(arr), gemm, precision)
    hit = _COMPUTED.get(key)
    if hit is not None and hit[0] is arr:
        return hit[1]
    if len(_COMPUTED) >= _COMPUTED_MAX:
        _COMPUTED.clear()
    estimate = array_estimate(gemm, profile, precision)
    _COMPUTED[key] = (arr, estimate)
    return estimate


def array_estimate(gemm: GemmShape, profile: HardwareProfile, precision: str
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
    if is_matvec(gemm.m, profile):
        est = matvec_compute(gemm, rows, cols, arr.matvec_rows,
                             getattr(arr.throughput, precision))
    floors = [weight_decode_cycles(gemm, arr.weight_decode)]
    if arr.output_per_cycle > 0:
        drained = gemm.groups * math.ceil(gemm.n / cols) * cols * gemm.m
        floors.append(math.ceil(drained / arr.output_per_cycle))
    floor = max(floors)
    # a new estimate only where a floor binds: this runs for every GEMM of every point an
    # evaluator or a sweep prices, and dataclasses.replace was a sixth of a point's time
    return replace(est, cycles=floor) if floor > est.cycles else est
