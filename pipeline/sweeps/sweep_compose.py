"""Compose a sweep job's config once per config-group combination.

Why: Hydra composes every job from scratch (defaults tree, ~15 YAML files, the Hydra node):
~0.2 s per job, as long as compiling and simulating mobilenet_v2 with fixed tiles, and the
basic sweeper composes every job twice (once to validate the batch). In a grid most jobs
differ only in values (``compile.tiling.tile_m=64``), not in which YAML files are chosen.
This loader composes with Hydra's own loader once per distinct set of defaults-changing
overrides (config groups such as ``hardware=edge_tpu``, and Hydra's own overrides), then
applies the job's value overrides with the same function Hydra uses after composition
(``ConfigLoaderImpl._apply_overrides_to_config``) and records the job's overrides in the
Hydra node exactly as ``_load_configuration_impl`` does. tests/test_sweep_points.py checks
that every job's config equals Hydra's own composition, key for key.

The cache is per process (a module dict), so the joblib and Ray launchers, which ship the
loader to worker processes task by task, keep it between tasks on the same worker.
"""

from __future__ import annotations

import copy
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf, open_dict

_BASES: dict[tuple, DictConfig] = {}


def _changes_defaults(override: Override, loader: ConfigLoaderImpl) -> bool:
    """Hydra's own test (defaults_list.Overrides): a non-dict override of an existing config
    group picks a YAML file; Hydra's overrides (hydra/launcher=..., hydra.run.dir) shape the
    Hydra node. Everything else is a value set after composition."""
    if override.is_hydra_override():
        return True
    return (loader.repository.group_exists(override.key_or_group)
            and not isinstance(override.value(), dict))


class MemoConfigLoader:
    """A ConfigLoader whose ``load_sweep_config`` reuses compositions; everything else is
    the wrapped loader's."""

    def __init__(self, inner: ConfigLoaderImpl) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # during unpickling, before __init__'s state is back
            raise AttributeError(name)
        return getattr(self.inner, name)

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]
                          ) -> DictConfig:
        parsed = OverridesParser.create().parse_overrides(list(sweep_overrides))
        shaping = [o for o in parsed if _changes_defaults(o, self.inner)]
        values = [o for o in parsed if not _changes_defaults(o, self.inner)]
        key = (master_config.hydra.job.config_name,
               tuple(OmegaConf.to_container(master_config.hydra.overrides.hydra)),
               tuple(str(s.path) for s in self.inner.get_sources()),
               tuple(o.input_line for o in shaping))
        if key not in _BASES:
            _BASES[key] = self.inner.load_sweep_config(master_config,
                                                       [o.input_line for o in shaping])
        cfg = copy.deepcopy(_BASES[key])
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        task = [o for o in parsed if not o.is_hydra_override()]
        naming = cfg.hydra.job.config.override_dirname
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in task]
            cfg.hydra.job.override_dirname = get_overrides_dirname(
                overrides=task, kv_sep=naming.kv_sep, item_sep=naming.item_sep,
                exclude_keys=naming.exclude_keys)
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
        return cfg
