"""Structured-config schemas for every config group, registered in Hydra's ConfigStore.

``conf/config.yaml`` starts its defaults list with ``npuflow_schema`` (the
:class:`NpuflowConfig` below), so each group's YAML is merged into a typed node: an unknown
key or a wrong type fails while Hydra composes, naming the full key. Required values are
``MISSING`` and are reported by :func:`pipeline.config.check_complete` right after
composition. ``hydra_plugins/npuflow`` calls :func:`register_configs` so that DVC's Hydra
composition (which does not import this package's entry point) sees the same schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from hardware.profile import HardwareProfile


@dataclass
class ModelReference:
    """Published figures a zoo model must reproduce (checked by the tests, shown in model.json)."""

    macs: float = 0.0
    params: int = 0
    source: str = ""


@dataclass
class ModelConfig:
    name: str = MISSING
    source: str = "zoo"  # zoo | onnx
    description: str = ""
    path: str | None = None  # for source=onnx
    input_shape: list[int] | None = None  # fixes dynamic dims (single-input models)
    opset: int = 17  # target opset of the exported model
    seed: int = 0  # weights of zoo models, inputs of the reference run
    params: dict[str, Any] = field(default_factory=dict)  # builder arguments
    reference: ModelReference = field(default_factory=ModelReference)


@dataclass
class DataConfig:
    name: str = MISSING
    kind: str = "synthetic"  # synthetic | digits | images | npy
    path: str | None = None  # images / npy folder
    calibration_size: int = 32
    eval_size: int = 64
    seed: int = 0
    # images: one preprocessing for calibration and evaluation
    resize: int | None = None  # short side before the centre crop (None: the crop size)
    scale: float = 1.0 / 255.0
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])
    channel_order: str = "RGB"  # RGB | BGR
    layout: str = "NCHW"  # NCHW | NHWC


@dataclass
class CalibrationConfig:
    method: str = "minmax"  # minmax | entropy | percentile
    percentile: float = 99.999
    num_bins: int = 2048
    num_quantized_bins: int = 128


@dataclass
class AnalysisConfig:
    layers: bool = True  # accumulated per-layer report
    isolated: bool = False  # also quantize each layer alone (one run per layer)
    samples: int = 8  # evaluation samples the per-layer runs use
    jump_cosine: float = 0.99  # name the first layer below this cosine


@dataclass
class AutoTarget:
    min_output_cosine: float | None = None
    max_top1_drop: float = 0.5  # percentage points, used when no cosine target is set


@dataclass
class AutoConfig:
    enabled: bool = False
    target: AutoTarget = field(default_factory=AutoTarget)
    max_float_layers: int = 10


@dataclass
class QuantConfig:
    scheme: str = MISSING  # none | fp16 | int8
    activation_type: str = "int8"  # int8 | uint8 | int16 (A16W8)
    weight_type: str = "int8"
    per_channel: bool = True
    activation_symmetric: bool = False
    weight_symmetric: bool = True
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    keep_float: list[str] = field(default_factory=list)  # node names or fnmatch patterns
    keep_first_n: int = 0  # first N compute layers stay float
    keep_last_n: int = 0
    float_precision: str = "fp16"  # how float layers of a quantized model run on the NPU
    tensor_overrides: dict[str, str] = field(default_factory=dict)  # tensor -> int16 ...
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    auto: AutoConfig = field(default_factory=AutoConfig)


@dataclass
class OptimizeConfig:
    passes: list[Any] = field(default_factory=list)  # names or {_target_: module.fn}
    tolerance: float = 1e-4  # max relative output error any pass may introduce
    abs_tolerance: float = 1e-6  # ...unless the max absolute error is within float32 rounding
    max_rounds: int = 3  # repeat the list until node counts stop changing
    pad_channels_to: int = 0  # > 1: pad Conv output channels to this multiple (last pass)


@dataclass
class TilingConfig:
    mode: str = "auto"  # auto | fixed
    tile_m: int | None = None  # fixed mode: tile sizes (None = the whole dimension)
    tile_n: int | None = None
    tile_k: int | None = None
    order: str = "mnk"  # fixed mode: tile loop order, outer to inner
    objective: str = "cycles"  # auto mode: cycles | energy | edp
    overrides: dict[str, Any] = field(default_factory=dict)  # kernel name -> {tile_m: ..}


@dataclass
class MemoryConfig:
    sram_fraction: float = 0.5  # share of SRAM for resident activations; the rest for tiles
    weights: str = "auto"  # auto (the profile's weight cache) | resident | streamed


@dataclass
class CompileConfig:
    fusion: bool = True  # master switch
    fusion_patterns: dict[str, bool] = field(default_factory=lambda: {
        "epilogue": True, "residual": True, "gelu": True, "silu": True, "elementwise": True,
        "pool": False})
    placement: str = "greedy"  # greedy | optimal
    # If/Loop/Scan: their bodies' cost depends on run-time data. error: stop naming the
    # node; host: run them on the CPU with the body uncosted (listed in uncosted_ops)
    control_flow: str = "error"
    tiling: TilingConfig = field(default_factory=TilingConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)


@dataclass
class SimulateConfig:
    frames: int = 1  # frames in the throughput run
    pipeline_depth: int = 1  # frames in flight between the CPU producer and the NPU
    preprocess_ms: float = 0.0  # per-frame host work before inference (decode, resize, ...)
    postprocess_ms: float = 0.0  # per-frame host work after it (NMS, argmax, ...)


@dataclass
class RunConfig:
    seed: int = 0
    ort_threads: int = 1  # onnxruntime intra-op threads (1 keeps digests bit-exact)
    cache_dir: str = ".npuflow-cache"  # trained zoo models; the stage cache
    cache: bool = True  # reuse stage outputs whose key (config slice + inputs) matches
    objective: str | None = None  # metric returned to a search sweeper (Optuna), e.g. latency_ms


@dataclass
class NpuflowConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    hardware: HardwareProfile = field(default_factory=HardwareProfile)
    quant: QuantConfig = field(default_factory=QuantConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimize: OptimizeConfig = field(default_factory=OptimizeConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    stages: dict[str, Any] = field(default_factory=dict)  # order + one _target_ per stage
    run: RunConfig = field(default_factory=RunConfig)


def register_configs() -> None:
    """Register the schemas; safe to call more than once."""
    cs = ConfigStore.instance()
    cs.store(name="npuflow_schema", node=NpuflowConfig)
