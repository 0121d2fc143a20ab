"""The hardware-target profile: a typed schema for one NPU and the host it hangs off.

Every hardware number npuflow uses comes from an instance of :class:`HardwareProfile`,
which is built from one YAML file in ``conf/hardware/``. The dataclasses
(``hardware.profile_schema``, re-exported here) are the schema:
OmegaConf rejects an unknown key or a wrong type while merging, and :func:`validate`
rejects values that are well-typed but physically meaningless (a zero bandwidth, an empty
array) and checks each ``units:`` section against its unit's own schema
(``hardware/units/``). Hydra registers the same dataclasses in its ConfigStore
(``pipeline.configuration.schema``), so a profile fails at compose time;
:func:`load_profile` gives the same checks without Hydra.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hardware.bounds import BoundsError, check_tree
from hardware.fixed_nodes import remembered
from hardware.profile_file import ProfileError, read_profile_yaml
from hardware.profile_schema import (  # re-exported: the schema's users import it from here
    PRECISIONS,
    ArenaHome,
    Confidence,
    ConfidenceKind,
    Dataflow,
    DepthwiseMode,
    DepthwiseUnit,
    Dma,
    Dram,
    Energy,
    Epilogue,
    FreeParameter,
    HardwareProfile,
    Host,
    Layout,
    Link,
    MacArray,
    PerPrecision,
    Precision,
    Sram,
    VectorUnit,
    WeightCompression,
    Weights,
)
from hardware.thermal import check_thermal
from hardware.units import unit_sections
from ops.activation import OPS_PER_ELEMENT
from ops.conv_lowering import LOWERINGS
from ops.registry import SPECS

__all__ = ["PRECISIONS", "ArenaHome", "Confidence", "ConfidenceKind", "Dataflow",
           "DepthwiseMode", "DepthwiseUnit", "Dma", "Dram", "Energy", "Epilogue",
           "FreeParameter", "HardwareProfile", "Host", "Layout", "Link", "MacArray",
           "PerPrecision", "Precision", "ProfileError", "Sram", "VectorUnit",
           "WeightCompression", "Weights", "load_profile", "profile_from_config",
           "profile_value", "validate"]


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
    profile.units = typed_units(profile.units, f"{prefix}.units")
    try:
        check_tree(profile, prefix)
        for name, params in profile.units.items():
            check_tree(params, f"{prefix}.units.{name}")
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
    if profile.dma.matvec_overlap and profile.mac_array.matvec_rows <= 0:
        raise ProfileError(f"{prefix}.dma.matvec_overlap", "needs a matrix-vector product: "
                           "set mac_array.matvec_rows (the rows one streams)")
    if profile.dram.stream_gbps > 0 and profile.mac_array.matvec_rows <= 0:
        raise ProfileError(f"{prefix}.dram.stream_gbps", "needs a matrix-vector product: "
                           "set mac_array.matvec_rows (the rows one streams)")
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


def typed_units(raw: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Each ``units:`` entry as its unit's ``Section`` dataclass (``hardware/units/``):
    OmegaConf refuses an unknown key or a wrong type as it does for the profile's own
    sections; an entry already typed (a built profile validated again) is kept."""
    known = unit_sections()
    typed: dict[str, Any] = {}
    for name, params in raw.items():
        if name not in known:
            raise ProfileError(f"{prefix}.{name}", "not an execution unit with a profile "
                               f"section (known: {', '.join(known) or 'none'})")
        if isinstance(params, known[name]):
            typed[name] = params
            continue
        typed[name] = _typed(known[name], params or {}, f"{prefix}.{name}")
    return typed


def profile_value(profile: HardwareProfile, dotted: str) -> Any:
    """The value at a dotted key (``dram.bandwidth_gbps``); KeyError if there is none."""
    value = _resolve(profile, dotted)
    if value is _MISSING_KEY:
        raise KeyError(dotted)
    return value


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
    if free.spread is not None and not 1 < free.spread < 1000:
        raise ProfileError(f"{where}.spread", f"{free.spread} is not a factor between 1 and "
                           "1000 (1.5 means: trusted within 1.5x either way)")


def check_priors(profile: HardwareProfile, prefix: str = "hardware") -> None:
    """A calibration starts from the profile's values and searches within each ``calibrate``
    entry's bounds: a value outside them cannot be the start. Checked by the calibration
    alone: a run or a sweep that sets the value (a what-if at 51 GB/s) is not fitting it."""
    for i, free in enumerate(profile.calibrate):
        value = profile_value(profile, free.key)
        if not free.low <= value <= free.high:
            raise ProfileError(f"{prefix}.calibrate[{i}]",
                               f"{free.key} = {value} lies outside [{free.low}, {free.high}], "
                               "where the calibration searches; widen the bounds or start "
                               "inside them")


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
    key = _content_key(cfg, prefix)
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


def _content_key(cfg: DictConfig | dict, prefix: str) -> tuple[str, str] | None:
    """The memo key of a profile's source: its prefix and resolved content (None when it
    does not resolve or serialise; then it is built, and refused, without the memo). A
    node declared fixed (``hardware.fixed_nodes``) is serialised once."""
    def key() -> tuple[str, str] | None:
        try:
            content = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True) \
                if isinstance(cfg, DictConfig) else cfg
            return prefix, json.dumps(content, sort_keys=True)
        except (OmegaConfBaseException, TypeError, ValueError):
            return None

    return remembered(cfg, f"profile key {prefix}", key)


def _typed(schema: type, cfg: DictConfig | dict, prefix: str) -> Any:
    """``cfg`` as an instance of the dataclass ``schema``: merged against it (unknown keys
    and wrong types refused by OmegaConf), every required value present; a config already
    typed as ``schema`` (Hydra composed it) is not merged again. Errors name the key."""
    try:
        typed = isinstance(cfg, DictConfig) and OmegaConf.get_type(cfg) is schema
        node = cfg if typed else OmegaConf.merge(OmegaConf.structured(schema), cfg)
        missing = sorted(OmegaConf.missing_keys(node))
        if missing:
            raise ProfileError(f"{prefix}.{missing[0]}", "missing required value")
        return OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise ProfileError(f"{prefix}.{key}", str(exc).splitlines()[0]) from exc


def _build_profile(cfg: DictConfig | dict, prefix: str) -> HardwareProfile:
    profile = _typed(HardwareProfile, cfg, prefix)
    assert isinstance(profile, HardwareProfile)
    profile.ops = {k: dict(v or {}) for k, v in profile.ops.items()}
    return validate(profile, prefix)


def load_profile(path: str | Path) -> HardwareProfile:
    """Load a profile from a plain YAML file (no Hydra; a defaults list naming sibling
    profiles is resolved as Hydra would); errors name the file and key."""
    return profile_from_config(read_profile_yaml(path), prefix=str(path))
