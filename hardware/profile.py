"""The hardware-target profile: a typed schema for one NPU and the host it hangs off.

Every hardware number npuflow uses comes from an instance of :class:`HardwareProfile`,
which is built from one YAML file in ``conf/hardware/``. The dataclasses are the schema:
OmegaConf rejects an unknown key or a wrong type while merging, and :func:`validate`
rejects values that are well-typed but physically meaningless (a zero bandwidth, an empty
array). Hydra registers the same dataclasses in its ConfigStore
(``pipeline.configuration.schema``), so a profile fails at compose time;
:func:`load_profile` gives the same checks without Hydra.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hardware.bounds import (
    AT_LEAST_1,
    NON_NEGATIVE,
    POSITIVE,
    BoundsError,
    bounded,
    check_tree,
    choices,
)
from hardware.profile_file import ProfileError, read_profile_yaml
from hardware.thermal import ColdStart, PowerMode, Thermal, check_thermal
from ops.activation import OPS_PER_ELEMENT
from ops.conv_lowering import LOWERINGS
from ops.registry import SPECS

PRECISIONS = ("int8", "int16", "fp16", "fp32")
Dataflow = choices("Dataflow", "ws", "os", "is")
ArenaHome = choices("ArenaHome", "budget", "sram", "dram")
Layout = choices("Layout", "NHWC", "NCHW")
DepthwiseUnit = choices("DepthwiseUnit", "array", "vector", "engine")
WeightCompression = choices("WeightCompression", "none", "entropy")
Precision = choices("Precision", *PRECISIONS)


@dataclass
class PerPrecision:
    """One number per precision. On ``mac_array.throughput`` it is MACs per PE per cycle
    (0 = that precision does not run on the array); on ``energy.mac_pj`` it is pJ per MAC."""

    int8: float = bounded(MISSING, NON_NEGATIVE)
    int16: float = bounded(MISSING, NON_NEGATIVE)
    fp16: float = bounded(MISSING, NON_NEGATIVE)
    fp32: float = bounded(MISSING, NON_NEGATIVE)


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
    # the largest dilation the array applies itself; a convolution dilated further runs as
    # its kernel dilated with zeros (hardware/dilation.py, Vela's fixup_dilation_gt2);
    # 0: any dilation in hardware
    hardware_dilation: int = bounded(0, NON_NEGATIVE, plausible=(0, 64))
    # other [rows, cols] the same PEs can be arranged as, per kernel, the fastest one taken
    # (Ethos-U85's output microblocks: 2x2x32 / 1x4x32 / 2x4x16 on the 1024-MAC
    # configuration, so a 16-channel layer takes 8 pixels at a time instead of 4);
    # each must hold rows x cols PEs
    shapes: list[list[int]] = field(default_factory=list)


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
    while writing; when false the Add is its own elementwise pass (Vela on Ethos-U)."""

    activations: list[str] = field(default_factory=lambda: ["Relu", "Clip"])
    lut_activations: list[str] = field(default_factory=list)
    lut_elements_per_cycle: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 65536))
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
    # output bytes a pass retires per cycle at most, whatever its operations per element
    # (NVDLA specifies its SDP / PDP in elements per cycle; a byte-wide path retires half
    # as many 16-bit elements); 0: only ``lanes`` binds
    output_bytes_per_cycle: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 65536))


@dataclass
class Sram:
    size_kb: float = bounded(MISSING, POSITIVE, plausible=(1, 1 << 20))
    bandwidth_bytes_per_cycle: float = bounded(MISSING, POSITIVE, plausible=(1, 65536))
    # where the tensor arena (every feature map) lives. budget: feature maps get
    # compile.memory.sram_fraction of size_kb and the rest spill to DRAM. sram: the SRAM
    # holds the whole arena, however large (Vela's Sram_Only and Shared_Sram modes: the arena
    # is sized to what the network needs; nothing spills, the flash the weights come from
    # being read-only). dram: the arena is in DRAM and the SRAM only stages tiles and
    # weights (Vela's Dedicated_Sram mode: "the SRAM is used for the cache_mem_area",
    # Vela 5.2 OPTIONS.md)
    arena: ArenaHome = "budget"


@dataclass
class Dram:
    bandwidth_gbps: float = bounded(MISSING, POSITIVE, plausible=(0.01, 10000))  # 1e9 B/s
    latency_ns: float = bounded(MISSING, NON_NEGATIVE, plausible=(0, 100000))  # per burst


@dataclass
class Dma:
    """``double_buffering``: the convolution pipeline (the array and the depthwise engine)
    prefetches tile i+1 while it computes tile i, so a kernel takes max(compute, memory);
    without it the operands are loaded, then computed on: compute + memory. Streaming
    units (vector, copy) read, compute and write as one pipeline either way."""
    double_buffering: bool = MISSING


@dataclass
class Host:
    # sustained fp32 GFLOP/s of the fallback CPU
    gflops: float = bounded(MISSING, POSITIVE, plausible=(0.01, 1e6))
    bandwidth_gbps: float = bounded(MISSING, POSITIVE, plausible=(0.01, 10000))
    layout: Layout = Layout.NCHW


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
    # where each value comes from, by dotted key (a section covers its keys): one of
    # PROVENANCE_KINDS, then what exactly ("vendor_compiler: RKNN-Toolkit2 2.5.0 estimate")
    provenance: dict[str, str] = field(default_factory=dict)

    @property
    def peak_macs_per_cycle(self) -> dict[str, float]:
        """MACs per cycle of the whole NPU per precision (rows x cols x throughput x cores)."""
        pes = self.mac_array.rows * self.mac_array.cols * self.cores
        return {p: pes * getattr(self.mac_array.throughput, p) for p in PRECISIONS}


# where a profile value may come from: a datasheet or product brief; the vendor's own
# compiler or estimator (its source or output: Vela, RKNN-Toolkit2, libedgetpu); a paper;
# fitted to measured figures (say on which pairs); an assumption
PROVENANCE_KINDS = ("datasheet", "vendor_compiler", "paper", "fitted", "assumption")
_MISSING_KEY = object()


def _resolve(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if isinstance(obj, dict):
            obj = obj.get(part, _MISSING_KEY)
        else:
            obj = getattr(obj, part, _MISSING_KEY)
        if obj is _MISSING_KEY:
            return obj
    return obj


def validate(profile: HardwareProfile, prefix: str = "hardware") -> HardwareProfile:
    """Reject physically meaningless values (the ranges declared on the fields, and the
    cross-checks below); the error names the full key. Choices are enums, which OmegaConf
    checks while merging."""
    try:
        check_tree(profile, prefix)
    except BoundsError as exc:
        raise ProfileError(exc.key, exc.reason) from exc
    for key in ("activations", "lut_activations"):
        for i, op in enumerate(getattr(profile.epilogue, key)):
            if op not in OPS_PER_ELEMENT:
                raise ProfileError(f"{prefix}.epilogue.{key}[{i}]",
                                   f"'{op}' is not an activation op type npuflow knows")
    if profile.epilogue.lut_activations and profile.epilogue.lut_elements_per_cycle <= 0:
        raise ProfileError(f"{prefix}.epilogue.lut_elements_per_cycle",
                           "must be > 0 when lut_activations are listed")
    for i, op in enumerate(profile.multicore_ops or []):
        if op not in SPECS:
            raise ProfileError(f"{prefix}.multicore_ops[{i}]",
                               f"'{op}' is not an ONNX op type npuflow knows")
    arr = profile.mac_array
    for i, shape in enumerate(arr.shapes):
        if len(shape) != 2 or min(shape) < 1 or shape[0] * shape[1] != arr.rows * arr.cols:
            raise ProfileError(f"{prefix}.mac_array.shapes[{i}]",
                               f"{list(shape)} must be [rows, cols] holding the array's "
                               f"{arr.rows * arr.cols} PEs")
    dw = profile.mac_array.depthwise
    if dw.pixels % dw.block_rows:
        raise ProfileError(f"{prefix}.mac_array.depthwise.block_rows",
                           f"must divide pixels ({dw.pixels}), got {dw.block_rows}")
    if dw.unit == "engine" and dw.channels * dw.pixels * dw.taps / dw.step_cycles > \
            profile.mac_array.rows * profile.mac_array.cols:
        raise ProfileError(f"{prefix}.mac_array.depthwise",
                           "the depthwise engine cannot do more MACs per cycle (channels x "
                           "pixels x taps / step_cycles) than the array has PEs")
    if not any(getattr(profile.mac_array.throughput, p) > 0 for p in PRECISIONS):
        raise ProfileError(f"{prefix}.mac_array.throughput", "no precision runs on the array")
    if profile.weights.cache_kb > profile.sram.size_kb:
        raise ProfileError(f"{prefix}.weights.cache_kb",
                           f"the weight cache ({profile.weights.cache_kb} KB) cannot be "
                           f"larger than the SRAM ({profile.sram.size_kb} KB)")
    for op, limits in profile.ops.items():
        _check_op_limits(op, limits, f"{prefix}.ops.{op}")
    for key, source in profile.provenance.items():
        kind = source.split(":", 1)[0].strip()
        if kind not in PROVENANCE_KINDS:
            raise ProfileError(f"{prefix}.provenance.{key}",
                               f"'{kind}' is not a source kind ({', '.join(PROVENANCE_KINDS)})")
        if _resolve(profile, key) is _MISSING_KEY:
            raise ProfileError(f"{prefix}.provenance.{key}", "not a key of the profile")
    band = profile.confidence
    if (band.ratio_low is None) != (band.ratio_high is None) or (
            band.ratio_low is not None and band.ratio_low > band.ratio_high):
        raise ProfileError(f"{prefix}.confidence", "ratio_low and ratio_high: both or neither, "
                           "and ratio_low <= ratio_high")
    for i, free in enumerate(profile.calibrate):
        _check_free_parameter(profile, free.key, free, f"{prefix}.calibrate[{i}]")
    keys = [free.key for free in profile.calibrate]
    if len(set(keys)) < len(keys):
        raise ProfileError(f"{prefix}.calibrate", "a key is listed twice")
    check_thermal(profile.thermal, profile.power_modes, profile.default_power_mode,
                  profile.frequency_mhz, prefix)
    return profile


def profile_value(profile: HardwareProfile, dotted: str) -> Any:
    """The value at a dotted key (``dram.bandwidth_gbps``); KeyError if there is none."""
    obj: Any = profile
    for part in dotted.split("."):
        if not hasattr(obj, part):
            raise KeyError(dotted)
        obj = getattr(obj, part)
    return obj


def _check_free_parameter(profile: HardwareProfile, key: str, free: FreeParameter,
                          where: str) -> None:
    try:
        value = profile_value(profile, key)
    except KeyError:
        raise ProfileError(where, f"'{key}' is not a key of the profile") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(where, f"'{key}' is not a number, it cannot be fitted")
    if not free.low < free.high:
        raise ProfileError(where, f"low ({free.low}) must be below high ({free.high})")
    if not free.low <= value <= free.high:
        raise ProfileError(where, f"the profile's value {value} lies outside "
                           f"[{free.low}, {free.high}]")
    if free.spread is not None and not 1 < free.spread < 1000:
        raise ProfileError(f"{where}.spread", f"{free.spread} is not a factor between 1 and "
                           "1000 (1.5 means: trusted within 1.5x either way)")


def _check_op_limits(op: str, limits: Any, key: str) -> None:
    """An ``ops:`` entry names an op type npuflow knows and only limits its rules read: a
    misspelt limit would otherwise be silently unenforced."""
    if op not in SPECS:
        raise ProfileError(key, f"'{op}' is not an ONNX op type npuflow knows")
    if not isinstance(limits, dict | DictConfig):
        raise ProfileError(key, "must be a mapping of limits (or {})")
    known = sorted({k for check in SPECS[op].checks for k in check.limits})
    for name in limits:
        if name not in known:
            raise ProfileError(f"{key}.{name}", f"not a limit of {op}'s rules "
                               f"(known: {', '.join(known) or 'none'})")
    if "lowering" in limits and limits["lowering"] not in LOWERINGS:
        raise ProfileError(f"{key}.lowering", f"'{limits['lowering']}' is not a lowering "
                           f"npuflow knows ({', '.join(LOWERINGS)})")


def profile_from_config(cfg: DictConfig | dict, prefix: str = "hardware") -> HardwareProfile:
    """Build and validate a profile from a composed (or plain) config node. A node that is
    already typed as a HardwareProfile (Hydra composed it against the schema) is not merged
    again: the merge is most of the cost, and calibration builds hundreds of profiles.

    Built profiles are remembered per process by their content (a sweep's jobs, the door
    check and the compile and simulate stages all build the same one: ~28 ms each); every
    caller gets its own deep copy, so a caller that edits its profile changes no other's."""
    try:
        content = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True) \
            if isinstance(cfg, DictConfig) else cfg
        key: tuple[str, str] | None = (prefix, json.dumps(content, sort_keys=True))
    except (OmegaConfBaseException, TypeError, ValueError):  # built (and refused) below
        key = None
    if key is not None and key in _BUILT:
        return copy.deepcopy(_BUILT[key])
    profile = _build_profile(cfg, prefix)
    if key is not None:
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = copy.deepcopy(profile)
    return profile


_BUILT: dict[tuple[str, str], HardwareProfile] = {}
_BUILT_MAX = 256  # calibration builds a profile per candidate; keep the memo bounded


def _build_profile(cfg: DictConfig | dict, prefix: str) -> HardwareProfile:
    try:
        typed = isinstance(cfg, DictConfig) and OmegaConf.get_type(cfg) is HardwareProfile
        node = cfg if typed else OmegaConf.merge(OmegaConf.structured(HardwareProfile), cfg)
        missing = sorted(OmegaConf.missing_keys(node))
        if missing:
            raise ProfileError(f"{prefix}.{missing[0]}", "missing required value")
        profile = OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise ProfileError(f"{prefix}.{key}", str(exc).splitlines()[0]) from exc
    assert isinstance(profile, HardwareProfile)
    profile.ops = {k: dict(v or {}) for k, v in profile.ops.items()}
    return validate(profile, prefix)


def load_profile(path: str | Path) -> HardwareProfile:
    """Load a profile from a plain YAML file (no Hydra; a defaults list naming sibling
    profiles is resolved as Hydra would); errors name the file and key."""
    return profile_from_config(read_profile_yaml(path), prefix=str(path))
