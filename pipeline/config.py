"""Checks on a composed config that Hydra's schema merge cannot make by itself."""

from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf

from hardware.profile import HardwareProfile, ProfileError, profile_from_config
from pipeline.errors import UserError


def source_file(key: str, choices: Mapping[str, str | None]) -> str:
    """The YAML a key came from: ``<group>/<choice>.yaml`` in the config search path."""
    group = key.split(".")[0]
    choice = choices.get(group)
    return f"{group}/{choice}.yaml" if choice else "config.yaml"


def check_complete(cfg: DictConfig, choices: Mapping[str, str | None]) -> HardwareProfile:
    """Every required value is set and the hardware profile is physically meaningful."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        key = missing[0]
        raise UserError(f"{source_file(key, choices)}: missing required key '{key}'")
    try:
        return profile_from_config(cfg.hardware)
    except ProfileError as exc:
        raise UserError(f"{source_file('hardware', choices)}: {exc}") from exc
