"""The door: every check on a composed config that Hydra's schema merge cannot make by
itself, run once before the first stage does any work."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from hardware.bounds import BoundsError, check_section, check_tree
from hardware.fixed_nodes import remembered
from hardware.profile import HardwareProfile, profile_from_config
from pipeline.configuration import objective
from pipeline.configuration.schema import INTEGER_TYPES, TileOverride
from pipeline.configuration.schema_keys import all_keys, did_you_mean
from pipeline.errors import UserError
from pipeline.running import user_code

log = logging.getLogger("npuflow")

_HINTS = {"hardware.ops": " (an explicit 'ops: {}' means nothing runs on the NPU)"}


def source_file(key: str, choices: Mapping[str, str | None],
                overrides: Sequence[str] = (), composed: str = "config.yaml") -> str:
    """Where a key's value came from: the command-line override that set it, else the YAML
    it was read from (``<group>/<choice>.yaml`` in the config search path), else
    ``composed``, the file the whole config was read from (DVC's params.yaml)."""
    for override in overrides:
        name = override.partition("=")[0].lstrip("+~")
        if name in choices:  # hardware=bad picks a file: the file is the source
            continue
        if key == name or key.startswith(name + ".") or name.startswith(key + "."):
            return f"override '{override}'"
    group = key.split(".")[0]
    choice = choices.get(group)
    return f"{group}/{choice}.yaml" if choice else composed


def check_complete(cfg: DictConfig, choices: Mapping[str, str | None],
                   overrides: Sequence[str] = (), composed: str = "config.yaml"
                   ) -> HardwareProfile:
    """Every required value is set, every value lies in the range its schema field
    declares (``hardware/bounds.py``), and the hardware profile is physically meaningful.
    Values inside their range but implausible (a 0.001 KB SRAM) are logged as warnings.
    ``composed`` names the file a config came from whole (DVC's params.yaml)."""
    return checked_values(cfg, choices, overrides, composed)[0]


def checked_values(cfg: DictConfig, choices: Mapping[str, str | None],
                   overrides: Sequence[str] = (), composed: str = "config.yaml"
                   ) -> tuple[HardwareProfile, dict]:
    """``check_complete``, and the config's values it resolved on the way: a run hands
    them to ``run_pipeline`` instead of resolving the whole config again (~5 ms of a
    sweep point)."""

    def where(key: str) -> str:
        return source_file(key, choices, overrides, composed)

    container = _resolved(cfg)
    if container is None:
        key = sorted(OmegaConf.missing_keys(cfg))[0]
        raise UserError(f"{where(key)}: missing required key '{key}'"
                        f"{_HINTS.get(key, '')}")
    user_code.refresh(container)
    try:
        profile = profile_from_config(cfg.hardware)
        warnings = _checked_sections(cfg, container)
        for kernel, tiles in cfg.compile.tiling.overrides.items():
            check_tree(_tile_override(tiles, kernel), f"compile.tiling.overrides.{kernel}")
    except BoundsError as exc:
        raise UserError(f"{where(exc.key)}: {exc}") from exc
    _check_quant_types(cfg)
    _check_llm_context(cfg, where)
    _check_sources(cfg, where)
    objective.check(cfg)
    mode = cfg.simulate.sustained.power_mode
    if mode is not None and mode not in profile.power_modes:
        key = "simulate.sustained.power_mode"
        raise UserError(f"{where(key)}: {key}: '{mode}' is not a "
                        f"power mode of {profile.name} "
                        f"({', '.join(profile.power_modes) or 'it declares none'})")
    for warning in warnings:
        log.warning("%s: %s", where(warning.split(" ")[0]), warning)
    return profile, container


def _resolved(cfg: DictConfig) -> dict | None:
    """The config as plain values, or None when a required key is missing (one walk
    instead of OmegaConf.missing_keys' much slower one on the common, complete path). A
    group a sweep's jobs share is resolved once (``hardware.fixed_nodes``): the values
    are read, never modified, by the checks and the stages' cache keys."""
    nodes = {key: cfg._get_node(key) for key in cfg}
    try:
        if not all(isinstance(node, DictConfig | ListConfig) for node in nodes.values()):
            return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        return {key: remembered(node, "resolved", lambda node=node: OmegaConf.to_container(
            node, resolve=True, throw_on_missing=True)) for key, node in nodes.items()}
    except MissingMandatoryValue:
        if OmegaConf.missing_keys(cfg):
            return None
        return OmegaConf.to_container(cfg, resolve=True)  # an interpolation's own error


_CHECKED: dict[str, list[str]] = {}  # a section's content -> its warnings, per process


def _checked_sections(cfg: DictConfig, container: dict) -> list[str]:
    """The declared ranges of every section (``check_section``), each distinct section
    checked once per process: a sweep's jobs differ in a key or two, and building the
    typed objects of all ten sections for every job cost ~10 ms of a ~60 ms point."""
    warnings: list[str] = []
    for name in cfg:
        if name == "hydra":
            continue
        key = f"{name}={json.dumps(container[name], sort_keys=True, default=str)}"
        if key not in _CHECKED:
            node = cfg[name]
            unknown = _unknown_key(node, str(name)) if isinstance(node, DictConfig) else None
            if unknown:
                raise BoundsError(unknown, "not a key of npuflow's config"
                                  + did_you_mean(unknown, all_keys()))
            value = OmegaConf.to_object(node) if isinstance(node, DictConfig) else node
            found = check_section(value, str(name))
            if len(_CHECKED) >= 1024:
                _CHECKED.clear()
            _CHECKED[key] = found
        warnings += _CHECKED[key]
    return warnings


def _unknown_key(node: DictConfig, prefix: str) -> str | None:
    """A key under a typed section that its schema does not declare: Hydra's ``+key=value``
    adds one even to a typed node, and nothing would ever read it (a typo run silently)."""
    kind = OmegaConf.get_type(node)
    if not dataclasses.is_dataclass(kind):
        return None  # a free-form mapping (hardware.ops, stages): any key
    declared = {f.name for f in dataclasses.fields(kind)}
    for key in node:
        full = f"{prefix}.{key}"
        if key not in declared:
            return full
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            found = _unknown_key(child, full)
            if found:
                return found
    return None


def _tile_override(tiles: object, kernel: str) -> TileOverride:
    key = f"compile.tiling.overrides.{kernel}"
    try:
        node = OmegaConf.merge(OmegaConf.structured(TileOverride), tiles)
    except OmegaConfBaseException as exc:
        where = f"{key}.{exc.full_key}" if getattr(exc, "full_key", None) else key
        raise UserError(f"{where}: {str(exc).splitlines()[0]}") from exc
    obj = OmegaConf.to_object(node)
    assert isinstance(obj, TileOverride)
    return obj


def _check_sources(cfg: DictConfig, where: Callable[[str], str]) -> None:
    """The data source lists (folders, CSV rows, files named) and the eval metric imports,
    before export and optimize spend minutes on a run that would stop at quantize."""
    from pipeline import metrics
    from pipeline.datasets import loaders
    from pipeline.optimizer import registry as optimizer_registry

    def passes() -> None:
        for i, entry in enumerate(cfg.optimize.passes):
            if optimizer_registry.enabled(entry):
                optimizer_registry.resolve(entry, i)

    for key, check in (("data.path", lambda: loaders.source_files(cfg.data)),
                       ("eval.metric", lambda: metrics.resolve(cfg.eval.metric.get("_target_"))),
                       ("optimize.passes", passes)):
        try:
            check()
        except UserError as exc:
            raise UserError(f"{where(key)}: {exc}") from exc


def _check_llm_context(cfg: DictConfig, where: Callable[[str], str]) -> None:
    """A KV cache allocated for fewer positions than the run fills would report memory for
    a cache the run overflows."""
    llm = cfg.simulate.llm
    if llm.max_context is not None and llm.max_context < llm.prompt_tokens + llm.new_tokens:
        raise UserError(f"{where('simulate.llm.max_context')}: {llm.max_context} positions, "
                        f"fewer than the run's {llm.prompt_tokens} prompt + {llm.new_tokens} "
                        "new tokens fill")


def _check_quant_types(cfg: DictConfig) -> None:
    """Integer quantization needs integer types; the schema allows fp16/fp32 because the
    float schemes name their types with the same keys. Weight-only groups are what
    onnxruntime's blocked DequantizeLinear takes: a power of two from 16 (or 0)."""
    group = cfg.quant.get("group_size", 0)
    if group and (group < 16 or group & (group - 1)):
        raise UserError(f"quant.group_size: {group} is not 0 (per channel) or a power of two "
                        ">= 16")
    if cfg.quant.get("weight_bits", 4) not in (4, 8):
        raise UserError(f"quant.weight_bits: {cfg.quant.weight_bits}; weight-only "
                        "quantization stores 4 or 8 bits")
    if cfg.quant.scheme not in ("int8", "auto"):
        return
    keys = {f"quant.{k}": cfg.quant[k] for k in ("activation_type", "weight_type")}
    keys.update({f"quant.tensor_overrides.{t}": q for t, q in cfg.quant.tensor_overrides.items()})
    for key, value in keys.items():
        if value not in INTEGER_TYPES:
            raise UserError(f"{key}: quant.scheme=int8 quantizes to {', '.join(INTEGER_TYPES)}, "
                            f"got '{value}'")
