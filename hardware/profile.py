"""The hardware-target profile: a typed schema for one NPU and the host it hangs off.

Every hardware number npuflow uses comes from an instance of :class:`HardwareProfile`,
which is built from one YAML file in ``conf/hardware/``. The dataclasses are the schema:
OmegaConf rejects an unknown key or a wrong type while merging, and :func:`validate`
rejects values that are well-typed but physically meaningless (a zero bandwidth, an empty
array). Hydra registers the same dataclasses in its ConfigStore (``pipeline.schema``), so a
profile fails at compose time; :func:`load_profile` gives the same checks without Hydra.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ops.activation import OPS_PER_ELEMENT
from ops.registry import SPECS

PRECISIONS = ("int8", "int16", "fp16", "fp32")
DATAFLOWS = ("ws", "os", "is")
LAYOUTS = ("NHWC", "NCHW")


class ProfileError(ValueError):
    """A profile value that is well-typed but unusable; ``key`` is its full dotted name."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass
class PerPrecision:
    """One number per precision. On ``mac_array.throughput`` it is MACs per PE per cycle
    (0 = that precision does not run on the array); on ``energy.mac_pj`` it is pJ per MAC."""

    int8: float = MISSING
    int16: float = MISSING
    fp16: float = MISSING
    fp32: float = MISSING


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
    ``hardware/depthwise.py``)."""

    unit: str = "array"  # array | vector | engine
    channels: int = 1
    pixels: int = 1
    block_rows: int = 1
    taps: int = 1
    step_cycles: int = 1


@dataclass
class MacArray:
    rows: int = MISSING
    cols: int = MISSING
    dataflow: str = MISSING  # ws | os | is (weight-, output-, input-stationary)
    throughput: PerPrecision = field(default_factory=PerPrecision)
    depthwise: DepthwiseMode = field(default_factory=DepthwiseMode)


@dataclass
class Epilogue:
    """What the array's output stage applies to a result on its way out, at no cost.

    An activation listed here fuses into the producing Conv/Gemm; one that is not runs as
    its own vector (LUT) pass, as RKNN runs SiLU and Vela runs what the output stage lacks.
    ``residual_add``: the output stage can add a second tensor (a ResNet shortcut) while
    writing; when false the Add is its own elementwise pass (Vela on Ethos-U)."""

    activations: list[str] = field(default_factory=lambda: ["Relu", "Clip"])
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

    cache_kb: float = 0.0
    compression: str = "none"  # none | entropy


@dataclass
class VectorUnit:
    lanes: int = MISSING  # elementwise / activation / pooling elements per cycle


@dataclass
class Sram:
    size_kb: float = MISSING
    bandwidth_bytes_per_cycle: float = MISSING


@dataclass
class Dram:
    bandwidth_gbps: float = MISSING  # GB/s (1e9 bytes per second)
    latency_ns: float = MISSING  # paid once per DMA burst (tile transfer)


@dataclass
class Dma:
    double_buffering: bool = MISSING


@dataclass
class Host:
    gflops: float = MISSING  # sustained fp32 GFLOP/s of the fallback CPU
    bandwidth_gbps: float = MISSING
    layout: str = "NCHW"


@dataclass
class Link:
    bandwidth_gbps: float = MISSING  # NPU <-> CPU transfers
    sync_us: float = MISSING  # per hand-over (cache flush, interrupt, wake-up)


@dataclass
class Energy:
    mac_pj: PerPrecision = field(default_factory=PerPrecision)
    sram_pj_per_byte: float = MISSING
    dram_pj_per_byte: float = MISSING
    static_mw: float = MISSING


@dataclass
class HardwareProfile:
    name: str = MISSING
    description: str = MISSING
    based_on: str = MISSING  # the public source of the numbers
    frequency_mhz: float = MISSING
    cores: int = 1
    mac_array: MacArray = field(default_factory=MacArray)
    vector_unit: VectorUnit = field(default_factory=VectorUnit)
    sram: Sram = field(default_factory=Sram)
    dram: Dram = field(default_factory=Dram)
    dma: Dma = field(default_factory=Dma)
    dispatch_cycles: int = MISSING
    multicore_ops: list[str] | None = None  # op types split across cores (None: all)
    epilogue: Epilogue = field(default_factory=Epilogue)
    weights: Weights = field(default_factory=Weights)
    layout: str = "NHWC"
    channel_alignment: int = 1
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)  # op type -> limits
    host: Host = field(default_factory=Host)
    link: Link = field(default_factory=Link)
    energy: Energy = field(default_factory=Energy)

    @property
    def peak_macs_per_cycle(self) -> dict[str, float]:
        """MACs per cycle of the whole NPU per precision (rows x cols x throughput x cores)."""
        pes = self.mac_array.rows * self.mac_array.cols * self.cores
        return {p: pes * getattr(self.mac_array.throughput, p) for p in PRECISIONS}


_POSITIVE = (
    "frequency_mhz",
    "cores",
    "mac_array.rows",
    "mac_array.cols",
    "vector_unit.lanes",
    "sram.size_kb",
    "sram.bandwidth_bytes_per_cycle",
    "dram.bandwidth_gbps",
    "host.gflops",
    "host.bandwidth_gbps",
    "link.bandwidth_gbps",
    "channel_alignment",
    "mac_array.depthwise.channels",
    "mac_array.depthwise.pixels",
    "mac_array.depthwise.block_rows",
    "mac_array.depthwise.taps",
    "mac_array.depthwise.step_cycles",
)
_NON_NEGATIVE = (
    "weights.cache_kb",
    "dram.latency_ns",
    "dispatch_cycles",
    "link.sync_us",
    "energy.sram_pj_per_byte",
    "energy.dram_pj_per_byte",
    "energy.static_mw",
)
_CHOICES = {
    "mac_array.dataflow": DATAFLOWS,
    "mac_array.depthwise.unit": ("array", "vector", "engine"),
    "weights.compression": ("none", "entropy"),
    "layout": LAYOUTS,
    "host.layout": LAYOUTS,
}


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def validate(profile: HardwareProfile, prefix: str = "hardware") -> HardwareProfile:
    """Reject physically meaningless values; the error names the full key."""
    for key in _POSITIVE:
        if not _get(profile, key) > 0:
            raise ProfileError(f"{prefix}.{key}", f"must be > 0, got {_get(profile, key)}")
    for key in _NON_NEGATIVE:
        if _get(profile, key) < 0:
            raise ProfileError(f"{prefix}.{key}", f"must be >= 0, got {_get(profile, key)}")
    for key, allowed in _CHOICES.items():
        if _get(profile, key) not in allowed:
            raise ProfileError(
                f"{prefix}.{key}", f"must be one of {list(allowed)}, got {_get(profile, key)!r}"
            )
    for group in ("mac_array.throughput", "energy.mac_pj"):
        values = _get(profile, group)
        for f in fields(values):
            if getattr(values, f.name) < 0:
                raise ProfileError(f"{prefix}.{group}.{f.name}", "must be >= 0")
    for i, op in enumerate(profile.epilogue.activations):
        if op not in OPS_PER_ELEMENT:
            raise ProfileError(f"{prefix}.epilogue.activations[{i}]",
                               f"'{op}' is not an activation op type npuflow knows")
    for i, op in enumerate(profile.multicore_ops or []):
        if op not in SPECS:
            raise ProfileError(f"{prefix}.multicore_ops[{i}]",
                               f"'{op}' is not an ONNX op type npuflow knows")
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
    for op, limits in profile.ops.items():
        if not isinstance(limits, dict | DictConfig):
            raise ProfileError(f"{prefix}.ops.{op}", "must be a mapping of limits (or {})")
    return profile


def profile_from_config(cfg: DictConfig | dict, prefix: str = "hardware") -> HardwareProfile:
    """Build and validate a profile from a composed (or plain) config node."""
    try:
        node = OmegaConf.merge(OmegaConf.structured(HardwareProfile), cfg)
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
    """Load a profile from a plain YAML file (no Hydra); errors name the file and key."""
    path = Path(path)
    try:
        raw = OmegaConf.load(path)
    except (OSError, OmegaConfBaseException, ValueError) as exc:
        raise ProfileError(str(path), f"cannot read profile: {exc}") from exc
    if isinstance(raw, DictConfig):
        raw.pop("defaults", None)
    return profile_from_config(raw, prefix=str(path))
