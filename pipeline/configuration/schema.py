"""Structured-config schemas for every config group, registered in Hydra's ConfigStore.

``conf/config.yaml`` starts its defaults list with ``npuflow_schema`` (the
:class:`NpuflowConfig` below), so each group's YAML is merged into a typed node: an unknown
key or a wrong type fails while Hydra composes, naming the full key. Required values are
``MISSING`` and are reported by :func:`pipeline.configuration.config.check_complete` right after
composition. ``hydra_plugins/npuflow`` calls :func:`register_configs` so that DVC's Hydra
composition (which does not import this package's entry point) sees the same schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING

from hardware.bounds import (
    AT_LEAST_1,
    NON_NEGATIVE,
    PERCENT,
    POSITIVE,
    Range,
    bounded,
    choices,
)
from hardware.profile import HardwareProfile

ModelSource = choices("ModelSource", "zoo", "onnx", "torch", "sklearn", "tflite", "llm")
Exporter = choices("Exporter", "auto", "dynamo", "torchscript")
DataKind = choices("DataKind", "synthetic", "digits", "images", "npy", "image_folder",
                   "image_list")
ResizeMode = choices("ResizeMode", "crop", "stretch", "pad")
ChannelOrder = choices("ChannelOrder", "RGB", "BGR")
DataLayout = choices("DataLayout", "NCHW", "NHWC")
CalibrationMethod = choices("CalibrationMethod", "minmax", "entropy", "percentile")
# auto: int8 for a float model, as_is for one that is already quantized (the default)
# weight_only: integer weights, float activations (w4a16; onnxruntime's MatMulNBitsQuantizer)
Scheme = choices("Scheme", "none", "fp16", "int8", "as_is", "auto", "weight_only")
QuantType = choices("QuantType", "int8", "uint8", "int16", "fp16", "fp32")
INTEGER_TYPES = ("int8", "uint8", "int16")  # what quant.scheme=int8 can use
FloatPrecision = choices("FloatPrecision", "fp16", "fp32")
Placement = choices("Placement", "greedy", "optimal")
ControlFlow = choices("ControlFlow", "error", "host")
TilingMode = choices("TilingMode", "auto", "fixed")
LoopOrder = choices("LoopOrder", "mnk", "mkn", "nmk", "nkm", "kmn", "knm")
Objective = choices("Objective", "cycles", "energy", "edp")
WeightPolicy = choices("WeightPolicy", "auto", "resident", "streamed")


@dataclass
class ModelReference:
    """Published figures a zoo model must reproduce (checked by the tests, shown in model.json)."""

    macs: float = 0.0
    params: int = 0
    source: str = ""


@dataclass
class ModelConfig:
    """What network to run: a zoo name, an ONNX/TFLite file, a torch or scikit-learn source."""

    name: str = MISSING
    source: ModelSource = ModelSource.zoo
    description: str = ""
    # source=onnx (a .onnx file), tflite (a .tflite file), sklearn (a joblib file)
    path: str | None = None
    # a pre-quantized model's float original (.onnx or .tflite, the same inputs): the
    # per-layer error analysis of quant=as_is runs between the two
    float_path: str | None = None
    # fixes dynamic dims (single-input models); the export shape of source=torch
    input_shape: list[int] | None = bounded(None, AT_LEAST_1)
    batch: int = bounded(1, AT_LEAST_1)  # zoo models: images per inference
    module: str | None = None  # source=torch: package.module:factory -> nn.Module
    kwargs: dict[str, Any] = field(default_factory=dict)  # source=torch: factory arguments
    weights: str | None = None  # source=torch: a state_dict file (torch.save)
    exporter: Exporter = Exporter.auto  # source=torch: dynamo first, TorchScript fallback
    opset: int = bounded(17, Range(low=7))  # target opset of the exported model
    seed: int = 0  # weights of zoo models, inputs of the reference run
    params: dict[str, Any] = field(default_factory=dict)  # builder arguments
    # source=llm: a Hugging Face config.json (config), or its keys inline (hf, the presets);
    # the phases are built at simulate.llm's prompt and new tokens (conf/model/llm.yaml)
    config: str | None = None
    hf: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int = bounded(128, AT_LEAST_1, plausible=(1, 131072))
    new_tokens: int = bounded(64, AT_LEAST_1, plausible=(1, 131072))
    reference: ModelReference = field(default_factory=ModelReference)


@dataclass
class DataConfig:
    """Calibration and evaluation data: synthetic, digits, images, arrays; its preprocessing."""

    name: str = MISSING
    kind: DataKind = DataKind.synthetic
    path: str | None = None  # images / npy / image_folder folder; image_list CSV
    calibration_size: int = bounded(32, AT_LEAST_1)
    eval_size: int = bounded(64, AT_LEAST_1)
    seed: int = 0
    # images: one preprocessing for calibration and evaluation
    resize_mode: ResizeMode = ResizeMode.crop  # crop | stretch | pad (pipeline/datasets/images.py)
    resize: int | None = bounded(None, AT_LEAST_1)  # crop: short side before the centre crop
    pad_value: float = 0.0  # pad: fill, in the model's input space (after mean / std)
    classes: list[str] | None = None  # image_list: label names in output-index order
    scale: float = bounded(1.0 / 255.0, POSITIVE)
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list[float] = bounded(None, POSITIVE, factory=lambda: [0.229, 0.224, 0.225])
    channel_order: ChannelOrder = ChannelOrder.RGB
    layout: DataLayout = DataLayout.NCHW


@dataclass
class CalibrationConfig:
    method: CalibrationMethod = CalibrationMethod.minmax
    percentile: float = bounded(99.999, PERCENT)
    num_bins: int = bounded(2048, AT_LEAST_1)
    num_quantized_bins: int = bounded(128, AT_LEAST_1)


@dataclass
class AnalysisConfig:
    layers: bool = True  # accumulated per-layer report
    isolated: bool = False  # also quantize each layer alone (one run per layer)
    samples: int = bounded(8, AT_LEAST_1)  # evaluation samples the per-layer runs use
    jump_cosine: float = bounded(0.99, Range(low=-1, high=1))  # first layer below it


@dataclass
class AutoTarget:
    min_output_cosine: float | None = bounded(None, Range(low=-1, high=1))
    # percentage points of the eval objective (of top-1 agreement without labels), used
    # when no cosine target is set
    max_drop: float = bounded(0.5, Range(low=0, high=100))


@dataclass
class AutoConfig:
    enabled: bool = False
    target: AutoTarget = field(default_factory=AutoTarget)
    max_float_layers: int = bounded(10, NON_NEGATIVE)  # budget: layers kept float
    max_trials: int = bounded(40, AT_LEAST_1)  # budget: candidate evaluations
    samples: int = bounded(64, AT_LEAST_1)  # evaluation samples of the sensitivity runs


@dataclass
class EvalConfig:
    """How outputs are scored against labels: ``metric`` is a component, a callable
    ``(outputs, labels) -> dict[str, float]`` (``_target_`` plus its arguments; one that
    accepts ``metadata`` gets the model's ONNX metadata); ``objective`` names the key that
    automatic mixed precision and sweeps' accuracy use."""

    name: str = MISSING
    metric: dict[str, Any] = field(default_factory=dict)  # from conf/eval/<name>.yaml
    objective: str = MISSING


@dataclass
class QuantConfig:
    """Precision: none, fp16, int8 (onnxruntime calibrates), as_is, auto; mixed precision."""

    scheme: Scheme = MISSING
    # int16: A16W8; fp16/fp32 describe the float schemes (quant=fp16, quant=none)
    activation_type: QuantType = QuantType.int8
    weight_type: QuantType = QuantType.int8
    per_channel: bool = True
    activation_symmetric: bool = False
    weight_symmetric: bool = True
    # scheme=weight_only: bits of the MatMul weights (activations stay float_precision) and
    # the input rows sharing a scale (0: one scale per output channel; else a power of two
    # >= 16, onnxruntime's blocked DequantizeLinear)
    weight_bits: int = bounded(4, Range(low=4, high=8))
    group_size: int = bounded(0, NON_NEGATIVE)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    keep_float: list[str] = field(default_factory=list)  # node names or fnmatch patterns
    keep_first_n: int = bounded(0, NON_NEGATIVE)  # first N layers (+ activations) stay float
    keep_last_n: int = bounded(0, NON_NEGATIVE)
    # how float layers of a quantized model run on the NPU
    float_precision: FloatPrecision = FloatPrecision.fp16
    tensor_overrides: dict[str, QuantType] = field(default_factory=dict)  # tensor -> int16
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    auto: AutoConfig = field(default_factory=AutoConfig)


@dataclass
class OptimizeConfig:
    """The graph passes run before quantization, each checked in onnxruntime."""

    passes: list[Any] = field(default_factory=list)  # names or {_target_: module.fn}
    # max relative output error any pass may introduce...
    tolerance: float = bounded(1e-4, NON_NEGATIVE)
    # ...unless the max absolute error is within float32 rounding
    abs_tolerance: float = bounded(1e-6, NON_NEGATIVE)
    max_rounds: int = bounded(3, AT_LEAST_1)  # repeat the list until node counts settle
    # > 1: pad Conv output channels to this multiple (last pass)
    pad_channels_to: int = bounded(0, NON_NEGATIVE)


@dataclass
class TileOverride:
    """Fixed-mode tiles for one kernel (unset: the global tile_m / tile_n / tile_k)."""

    tile_m: int | None = bounded(None, AT_LEAST_1)
    tile_n: int | None = bounded(None, AT_LEAST_1)
    tile_k: int | None = bounded(None, AT_LEAST_1)
    order: LoopOrder | None = None


@dataclass
class TilingConfig:
    mode: TilingMode = TilingMode.auto
    # fixed mode: tile sizes (None = the whole dimension)
    tile_m: int | None = bounded(None, AT_LEAST_1)
    tile_n: int | None = bounded(None, AT_LEAST_1)
    tile_k: int | None = bounded(None, AT_LEAST_1)
    order: LoopOrder = LoopOrder.mnk  # fixed mode: tile loop order, outer to inner
    objective: Objective = Objective.cycles  # auto mode
    # kernel name -> TileOverride fields; a plain mapping so that the dotted override
    # +compile.tiling.overrides.conv_0.tile_m=8 works (checked against TileOverride at the
    # door, pipeline/configuration/config.py)
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class MemoryConfig:
    # share of SRAM for resident activations; the rest for tiles
    sram_fraction: float = bounded(0.5, Range(low=0, high=1, high_open=True))
    weights: WeightPolicy = WeightPolicy.auto  # auto: the profile's weight cache


@dataclass
class LlmContexts:
    """The prompt and generated tokens compile builds a language model's phases at."""

    prompt_tokens: int = II("simulate.llm.prompt_tokens")
    new_tokens: int = II("simulate.llm.new_tokens")


@dataclass
class CompileConfig:
    """Fusion, CPU/NPU placement, tiling and memory planning choices."""

    fusion: bool = True  # master switch
    fusion_patterns: dict[str, bool] = field(default_factory=lambda: {
        "epilogue": True, "residual": True, "gelu": True, "silu": True, "hardswish": True,
        "layernorm": True, "elementwise": True, "pool": False})
    placement: Placement = Placement.greedy
    # If/Loop/Scan: their bodies' cost depends on run-time data. error: stop naming the
    # node; host: run them on the CPU with the body uncosted (listed in uncosted_ops)
    control_flow: ControlFlow = ControlFlow.error
    tiling: TilingConfig = field(default_factory=TilingConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    # a language model's phases are compiled at the run's contexts (simulate.llm.*)
    llm: LlmContexts = field(default_factory=LlmContexts)


@dataclass
class SustainedConfig:
    """Minutes of inference through the profile's thermal model (hardware/thermal.py)."""

    seconds: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 86400))  # 0: off
    fps: float = bounded(0.0, NON_NEGATIVE)  # demand; 0: back to back
    power_mode: str | None = None  # a key of hardware.power_modes (None: its default)
    ambient_c: float | None = None  # None: the profile's thermal.ambient_c


@dataclass
class LlmRunConfig:
    """A language model's run: the prompt (prefill), the tokens generated (decode)."""

    prompt_tokens: int = bounded(128, AT_LEAST_1, plausible=(1, 131072))
    new_tokens: int = bounded(64, AT_LEAST_1, plausible=(1, 131072))
    # positions the KV cache is allocated for (memory_mb); None: prompt + new tokens
    max_context: int | None = bounded(None, AT_LEAST_1, plausible=(1, 1048576))


@dataclass
class SimulateConfig:
    """Frames, pipelining, host pre/post-processing, plots and sustained load."""

    frames: int = bounded(1, AT_LEAST_1)  # frames in the throughput run
    # frames in flight between the CPU producer and the NPU
    pipeline_depth: int = bounded(1, AT_LEAST_1)
    # per-frame host work before inference (decode, resize, ...) and after it (NMS, ...)
    preprocess_ms: float = bounded(0.0, NON_NEGATIVE)
    postprocess_ms: float = bounded(0.0, NON_NEGATIVE)
    # timeline / roofline / layers PNGs (most of a small model's simulate time). None
    # (auto): drawn in a single run, skipped in a sweep job (the sweep summary draws them
    # for the jobs it picks; python -m pipeline.simulator.plots RUN_DIR on demand)
    plots: bool | None = None
    sustained: SustainedConfig = field(default_factory=SustainedConfig)
    llm: LlmRunConfig = field(default_factory=LlmRunConfig)  # model=llm and its presets


@dataclass
class RunConfig:
    """Run-wide settings: seed, threads, the stage cache, the search objective."""

    seed: int = 0
    # onnxruntime intra-op threads (1 keeps digests bit-exact)
    ort_threads: int = bounded(1, AT_LEAST_1)
    cache_dir: str = ".npuflow-cache"  # trained zoo models; the stage cache
    cache: bool = True  # reuse stage outputs whose key (config slice + inputs) matches
    # a run folder holds one run: true replaces an earlier run found in hydra.run.dir (or a
    # multirun's hydra.sweep.dir); false refuses to start there
    replace: bool = False
    # metric returned to a search sweeper (Optuna), e.g. latency_ms, or a list of metrics
    # for a multi-objective search (NSGA-II)
    objective: Any = None


@dataclass
class NpuflowConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    hardware: HardwareProfile = field(default_factory=HardwareProfile)
    quant: QuantConfig = field(default_factory=QuantConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    optimize: OptimizeConfig = field(default_factory=OptimizeConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    stages: dict[str, Any] = field(default_factory=dict)  # order + one _target_ per stage
    run: RunConfig = field(default_factory=RunConfig)


def register_configs() -> None:
    """Register the schemas; safe to call more than once, and a second call (Hydra's plugin
    scan after the CLI's import) does not build the schema node again (~60 ms)."""
    cs = ConfigStore.instance()
    if "npuflow_schema.yaml" not in cs.repo:
        cs.store(name="npuflow_schema", node=NpuflowConfig)
