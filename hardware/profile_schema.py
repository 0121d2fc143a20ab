"""The hardware-target profile's schema: one dataclass per section of a YAML file in
``conf/hardware/``. OmegaConf rejects an unknown key or a wrong type while merging against
these; ``hardware.profile`` builds, validates and loads them. Its own module so that the
execution units (``hardware/units/``), which price kernels with a profile, import the
types without importing the loader that validates the units' own sections."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from hardware.bounds import (
    AT_LEAST_1,
    NON_NEGATIVE,
    POSITIVE,
    bounded,
    choices,
)
from hardware.thermal import ColdStart, PowerMode, Thermal

PRECISIONS = ("int8", "int16", "fp16", "fp32")
Dataflow = choices("Dataflow", "ws", "os", "is")
ArenaHome = choices("ArenaHome", "budget", "sram", "dram")
Layout = choices("Layout", "NHWC", "NCHW")
DepthwiseUnit = choices("DepthwiseUnit", "array", "vector", "engine")
WeightCompression = choices("WeightCompression", "none", "entropy")
Precision = choices("Precision", *PRECISIONS)
OutputCounts = choices("OutputCounts", "byte", "element")


@dataclass
class PerPrecision:
    """One number per precision. On ``mac_array.throughput`` it is MACs per PE per cycle
    (0 = that precision does not run on the array); on ``energy.mac_pj`` it is pJ per MAC."""

    int8: float = bounded(MISSING, NON_NEGATIVE)
    int16: float = bounded(MISSING, NON_NEGATIVE)
    fp16: float = bounded(MISSING, NON_NEGATIVE)
    fp32: float = bounded(MISSING, NON_NEGATIVE)


@dataclass
class WeightDecode:
    """The fewest cycles the MAC engine takes for an output micro-block's weights over one
    input slice, however few pixels share them: Vela's "ideal weight decode", cycles_wb =
    32 x micro-block depth / 8 per kernel step of ``ofm_channels`` outputs and
    ``ifm_channels`` inputs, against 4 cycles per micro-block of pixels
    (npu_performance.py ``_estimate_conv_cycles``; regor EstimateMacCyclesPerBlock). A
    block of fewer than ``pixels`` output pixels waits for its weights: a fully connected
    layer (one pixel) takes ``cycles`` per ``ofm_channels`` x ``ifm_channels`` weights.
    ``cycles`` 0: no such floor."""

    # cycles to decode one micro-block's weights over one input slice (Vela's cycles_wb);
    # 0: no floor
    cycles: int = bounded(0, NON_NEGATIVE, plausible=(0, 1024))
    # output pixels whose micro-blocks take as long as the decode (8 micro-blocks on the
    # U55/U65: 4 cycles each against 32)
    pixels: int = bounded(1, AT_LEAST_1, plausible=(1, 1024))
    # output channels of one micro-block
    ofm_channels: int = bounded(8, AT_LEAST_1, plausible=(1, 256))
    # GEMM depth (input channels x taps) of one input slice
    ifm_channels: int = bounded(32, AT_LEAST_1, plausible=(1, 256))


@dataclass
class DepthwiseMode:
    """How the NPU runs a depthwise convolution (one input channel per output channel).

    ``unit``: ``array`` runs one small GEMM per channel on the systolic array (SCALE-Sim's
    mapping, fill and drain per channel); ``vector`` runs it on the vector unit, one MAC per
    lane per cycle; ``engine`` is the channel-parallel mode of the MAC engine that NPUs
    built for MobileNets have: ``channels`` channels x ``pixels`` output pixels at once,
    ``taps`` kernel taps per step of ``step_cycles`` cycles; the pixels form a block of
    ``block_rows`` output rows (Vela's Ethos-U55-256 model: a 2x2x8 output micro-block, 4
    taps per 4 cycles, i.e. channels 8, pixels 4, block_rows 2, taps 4, step_cycles 4;
    ``hardware/depthwise.py``). ``full_rate``: the precisions the engine runs at its int8
    rate whatever the array's throughput for them (RKNN-Toolkit2's rk3588 and rk3568
    estimates keep fp16 depthwise at the int8 rate; Vela's Ethos-U model doubles int16, so
    it lists none)."""

    unit: DepthwiseUnit = DepthwiseUnit.array
    channels: int = bounded(1, AT_LEAST_1)
    pixels: int = bounded(1, AT_LEAST_1)
    block_rows: int = bounded(1, AT_LEAST_1)
    taps: int = bounded(1, AT_LEAST_1)
    step_cycles: int = bounded(1, AT_LEAST_1)
    full_rate: list[Precision] = field(default_factory=list)
    # the fewest cycles a kernel step of one channel block takes, however few pixels it
    # has: writing the output block back (Vela's cycles_wb = 32 x micro-block depth / 8);
    # a depthwise layer with a tiny output map pays it per step
    writeback_cycles: int = bounded(0, NON_NEGATIVE)
    # a spatial mean (ReduceMean over H, W; GlobalAveragePool) runs on this engine as a
    # depthwise convolution whose kernel is the whole map (Vela's
    # convert_mean_to_depthwise_conv), instead of as a vector pass
    spatial_means: bool = False


@dataclass
class MacArray:
    rows: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 4096))
    cols: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 4096))
    dataflow: Dataflow = MISSING  # ws | os | is (weight-, output-, input-stationary)
    throughput: PerPrecision = field(default_factory=PerPrecision)
    depthwise: DepthwiseMode = field(default_factory=DepthwiseMode)
    # results the output stage (NVDLA's SDP, RKNN's DPU) takes per cycle, a whole group of
    # ``cols`` kernels at a time; 0: it keeps up with the array (SCALE-Sim's assumption)
    output_per_cycle: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 4096))
    # input channels a direct-convolution array reads per kernel tap per cycle (NVDLA's
    # atomic-C): each tap's channels are padded to a multiple of it, so a 3-channel 3x3
    # layer costs 9 atoms per pixel; 0: im2col packs all taps together (SCALE-Sim's GEMM)
    tap_channels: int = bounded(0, NON_NEGATIVE, plausible=(0, 4096))
    # taps a convolution run kernel-first is stepped through at a time (Ethos-U85: four
    # for 8-bit inputs, regor EstimateMacCyclesPerBlock; hardware/kernel_first.py says
    # which convolutions): a 3x3 kernel takes three steps, 12 taps' time; 0: tap by tap
    kernel_first_taps: int = bounded(0, NON_NEGATIVE, plausible=(0, 64))
    # the largest dilation the array applies itself; a convolution dilated further runs as
    # its kernel dilated with zeros (hardware/dilation.py, Vela's fixup_dilation_gt2);
    # 0: any dilation in hardware
    hardware_dilation: int = bounded(0, NON_NEGATIVE, plausible=(0, 64))
    # other [rows, cols] the same PEs can be arranged as, per kernel, the fastest one taken
    # (Ethos-U85's output microblocks: 2x2x32 / 1x4x32 / 2x4x16 on the 1024-MAC
    # configuration, so a 16-channel layer takes 8 pixels at a time instead of 4);
    # each must hold rows x cols PEs
    shapes: list[list[int]] = field(default_factory=list)
    # a GEMM of at most this many rows (a matrix-vector product: a fully connected layer,
    # a language model's decode step) streams this many through each weight fold, pays
    # no fill or drain, and its weight stream overlaps its compute (RKNN-Toolkit2's
    # estimate of 1..16-row fully connected layers); 0: every GEMM is SCALE-Sim's time
    matvec_rows: int = bounded(0, NON_NEGATIVE, plausible=(0, 256))
    # the weight decoder's floor per output micro-block and input slice (WeightDecode)
    weight_decode: WeightDecode = field(default_factory=WeightDecode)


@dataclass
class Epilogue:
    """What the array's output stage applies to a result on its way out.

    ``activations`` fuse into the producing Conv/Gemm at no cost. ``lut_activations`` fuse
    too, but go through the output stage's lookup table, which takes
    ``lut_elements_per_cycle`` results per cycle after the convolution has produced them
    (RKNN compiles Conv + SiLU / Sigmoid / HardSwish as one ConvExSwish / ConvSigmoid /
    ConvHardSwish layer, and the boards take longer for it than for the plain convolution).
    Any other activation runs as its own vector pass, as Vela runs what the output stage
    lacks. ``residual_add``: the output stage can add a second tensor (a ResNet shortcut)
    while writing; when false the Add is its own elementwise pass (Vela on Ethos-U).
    ``lut_overlap``: see its comment (NVDLA's output stage runs in line with the
    accumulator; ``hardware/units/lut_epilogue.py``)."""

    activations: list[str] = field(default_factory=lambda: ["Relu", "Clip"])
    lut_activations: list[str] = field(default_factory=list)
    lut_elements_per_cycle: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 65536))
    # the table works on results as they leave the array (max(array, table) cycles); false:
    # its pass follows the convolution's (array + table)
    lut_overlap: bool = False
    residual_add: bool = False


@dataclass
class Weights:
    """Where parameters live between inferences, and how they move.

    ``cache_kb``: how much of the on-chip SRAM may keep parameters across inferences (the
    Edge TPU caches them in its 8 MB); the compiler fills it in execution order, never
    beyond what the activation arena leaves, and the rest stream from DRAM every
    inference. 0: every weight streams every inference (RKNN; Vela's
    Shared_Sram mode with weights in flash). ``compression``: ``entropy``
    moves weights as an entropy-coded stream (Vela's weight compressor); the bytes are the
    weights' measured Shannon entropy (``hardware/compression.py``)."""

    cache_kb: float = bounded(0.0, NON_NEGATIVE)
    compression: WeightCompression = WeightCompression.none


@dataclass
class VectorUnit:
    """``lanes``: elementwise / activation / pooling elements per cycle. ``chains``: a
    chain of elementwise ops (x*a+b, an activation's pieces) runs as one pass, reading its
    input once and writing once; false: each op is a pass of its own through DRAM, taking
    along only an activation its output stage applies (``epilogue.activations``), as
    RKNN-Toolkit2 compiles them (one layer per Mul and per Add) and Vela packs them (one
    elementwise op per pass)."""

    lanes: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 65536))
    chains: bool = True
    # output bytes a pass retires per cycle at most, whatever its operations per element;
    # 0: only ``lanes`` binds
    output_bytes_per_cycle: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 65536))
    # what that cap counts: byte (a byte-wide path retires half as many 16-bit elements)
    # or element (a path as wide as its widest type: the cap is in int8 bytes, and a
    # 16-bit element passes at an int8 element's rate, as NVDLA specifies its SDP / PDP
    # throughput, in elements per cycle)
    output_counts: OutputCounts = OutputCounts.byte
    # elements a normalisation (LayerNorm, InstanceNorm, GroupNorm: a mean and a variance
    # before anything is written) and a Softmax (a max and a sum along its axis) retire per
    # cycle at most; 0: only the caps above bind
    norm_elements_per_cycle: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 65536))
    softmax_elements_per_cycle: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 65536))


@dataclass
class Sram:
    size_kb: float = bounded(MISSING, POSITIVE, plausible=(1, 1 << 20))
    bandwidth_bytes_per_cycle: float = bounded(MISSING, POSITIVE, plausible=(1, 65536))
    # where the tensor arena (every feature map) lives. budget: intermediate feature maps
    # get compile.memory.sram_fraction of size_kb, the rest and the network's input and
    # output are in DRAM (Vela's Dedicated_Sram mode: the arena is in DRAM and regor's
    # FastStorageAllocator stages the maps that fit in the SRAM). sram: the SRAM holds
    # the whole arena, however large (Vela's Sram_Only and Shared_Sram modes: the arena
    # is sized to what the network needs; nothing spills, the flash the weights come from
    # being read-only). dram: the arena is in DRAM and the SRAM only stages tiles and
    # weights (RKNN-Toolkit2's estimate charges every layer's maps to DDR)
    arena: ArenaHome = "budget"


@dataclass
class Dram:
    """``bandwidth_gbps``: the rate the NPU's tiles move at (RKNN-Toolkit2's DDR column,
    Vela's memory config). ``stream_gbps``: the rate of one long sequential read, a
    matrix-vector product's weights (``mac_array.matvec_rows`` rows or fewer) passing
    through once in address order, as a language model's decode step reads every weight;
    never below ``bandwidth_gbps`` (0: the same). Tiles of a convolution are short strided
    bursts, a weight stream whole rows of pages, so DRAM serves the second closer to its
    peak."""

    bandwidth_gbps: float = bounded(MISSING, POSITIVE, plausible=(0.01, 10000))  # 1e9 B/s
    latency_ns: float = bounded(MISSING, NON_NEGATIVE, plausible=(0, 100000))  # per burst
    stream_gbps: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 10000))  # 1e9 B/s


@dataclass
class Dma:
    """``double_buffering``: the NPU (the array, the depthwise engine, the vector unit)
    prefetches tile i+1 while it computes tile i, so a kernel takes max(compute, memory);
    without it the operands are loaded, then computed on: compute + memory. Copies read
    and write as one stream either way.
    ``matvec_overlap``: a matrix-vector product (``mac_array.matvec_rows`` rows or fewer)
    streams its weights behind its compute even without double buffering: they pass
    through once and its activations are a few rows (RKNN-Toolkit2's estimate of a fully
    connected layer is max(DDR, NPU) cycles where its convolutions are not)."""
    double_buffering: bool = MISSING
    matvec_overlap: bool = False


@dataclass
class Host:
    # sustained fp32 GFLOP/s of the fallback CPU
    gflops: float = bounded(MISSING, POSITIVE, plausible=(0.01, 1e6))
    bandwidth_gbps: float = bounded(MISSING, POSITIVE, plausible=(0.01, 10000))
    layout: Layout = Layout.NCHW
    # the vendor runtime's fallback kernels evaluate exp / tanh / erf one element at a time,
    # converting each from the NPU's layout and precision and back: ns per evaluation on
    # top of the arithmetic at ``gflops``; 0: vectorised, counted in the arithmetic
    transcendental_ns: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 10000))
    # power the host draws above idle while it runs the application's CPU work (pre- and
    # post-processing, fallback kernels): heat in the package the NPU shares (sustained
    # load); 0: the host's heat is left out
    active_w: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 200))


@dataclass
class Link:
    bandwidth_gbps: float = bounded(MISSING, POSITIVE, plausible=(0.001, 10000))  # NPU <-> CPU
    # per hand-over (cache flush, interrupt, wake-up)
    sync_us: float = bounded(MISSING, NON_NEGATIVE, plausible=(0, 100000))


@dataclass
class Energy:
    mac_pj: PerPrecision = field(default_factory=PerPrecision)
    sram_pj_per_byte: float = bounded(MISSING, NON_NEGATIVE)
    dram_pj_per_byte: float = bounded(MISSING, NON_NEGATIVE)
    static_mw: float = bounded(MISSING, NON_NEGATIVE)


@dataclass
class FreeParameter:
    """A profile number that ``npuflow-calibrate`` may move, within ``[low, high]``
    (``pipeline/calibrate``). Both bounds are required: a fit without bounds can explain
    any measurement with an absurd value. ``spread`` (optional, > 1) says how far the
    profile's own value is trusted: one standard deviation is a factor ``spread`` either
    way, and the fit pays for leaving it (a log-normal prior); without it every value inside
    the bounds is equally likely."""

    key: str = MISSING  # dotted profile key, e.g. dram.bandwidth_gbps
    low: float = bounded(MISSING, POSITIVE)
    high: float = bounded(MISSING, POSITIVE)
    spread: float | None = None


ConfidenceKind = choices("ConfidenceKind", "none", "board", "vendor_estimate",
                         "leave_one_out")


@dataclass
class Confidence:
    """How far this profile's latencies have been from measurements of its chip: the
    lowest and highest npuflow / measured ratio over its check pairs (pairs never used to
    set a value; ``benchmarks/silicon_agreement.py --write-confidence``) or, for a
    calibrated profile, over its leave-one-out predictions (``npuflow-calibrate``). A run
    reports ``latency_ms_low`` = latency / ``ratio_high`` and ``latency_ms_high`` =
    latency / ``ratio_low``: where the measured latency fell for those networks."""

    ratio_low: float | None = bounded(None, POSITIVE)
    ratio_high: float | None = bounded(None, POSITIVE)
    pairs: int = bounded(0, NON_NEGATIVE)
    kind: ConfidenceKind = ConfidenceKind.none
    based_on: str = ""


@dataclass
class HardwareProfile:
    """A target NPU: array, memories, units, op limits, energy, host, thermal (conf/hardware/)."""

    name: str = MISSING
    description: str = MISSING
    based_on: str = MISSING  # the public source of the numbers
    frequency_mhz: float = bounded(MISSING, POSITIVE, plausible=(1, 10000))
    cores: int = bounded(1, AT_LEAST_1, plausible=(1, 256))
    mac_array: MacArray = field(default_factory=MacArray)
    vector_unit: VectorUnit = field(default_factory=VectorUnit)
    sram: Sram = field(default_factory=Sram)
    dram: Dram = field(default_factory=Dram)
    dma: Dma = field(default_factory=Dma)
    dispatch_cycles: int = bounded(MISSING, NON_NEGATIVE, plausible=(0, 10_000_000))
    multicore_ops: list[str] | None = None  # op types split across cores (None: all)
    epilogue: Epilogue = field(default_factory=Epilogue)
    weights: Weights = field(default_factory=Weights)
    layout: Layout = Layout.NHWC
    channel_alignment: int = bounded(1, AT_LEAST_1)
    # a Concat costs nothing: its inputs' producers write into their slices of its output
    # (Vela writes concatenations in place; RKNN and NVDLA copy)
    concat_in_place: bool = False
    # the NPU's compiler maps one segment of the graph: a kernel it cannot run and every
    # kernel downstream of it run on the host, supported or not (the Edge TPU compiler
    # partitions a model once)
    single_npu_segment: bool = False
    # op type -> limits; required: ``ops: {}`` says "nothing runs on the NPU"
    ops: dict[str, dict[str, Any]] = MISSING
    host: Host = field(default_factory=Host)
    link: Link = field(default_factory=Link)
    energy: Energy = field(default_factory=Energy)
    # the assumptions a calibration may fit, with bounds (physical facts are not listed)
    calibrate: list[FreeParameter] = field(default_factory=list)
    # sustained load (hardware/thermal.py): operating points, cooling and governor, and
    # what the first inference pays
    power_modes: dict[str, PowerMode] = field(default_factory=dict)
    default_power_mode: str | None = None
    thermal: Thermal = field(default_factory=Thermal)
    cold_start: ColdStart = field(default_factory=ColdStart)
    confidence: Confidence = field(default_factory=Confidence)
    # parameters of the execution units that bring their own profile section
    # (``hardware/units/``): a unit's name -> its parameters, checked against that unit's
    # ``Section`` dataclass when the profile is built (a unit absent here is not fitted)
    units: dict[str, Any] = field(default_factory=dict)
    # where each value comes from, by dotted key (a section covers its keys): one of
    # PROVENANCE_KINDS, then what exactly ("vendor_compiler: RKNN-Toolkit2 2.5.0 estimate")
    provenance: dict[str, str] = field(default_factory=dict)

    @property
    def peak_macs_per_cycle(self) -> dict[str, float]:
        """MACs per cycle of the whole NPU per precision (rows x cols x throughput x cores)."""
        pes = self.mac_array.rows * self.mac_array.cols * self.cores
        return {p: pes * getattr(self.mac_array.throughput, p) for p in PRECISIONS}
