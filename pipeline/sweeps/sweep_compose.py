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

Each job gets its own copy of the Hydra node and of every group a value override touches;
the other groups are shared between the jobs of a composition, read-only. Copying them all
cost ~11 ms a job (half of it the hardware profile), a fifth of a compile x simulate point.
Only groups without interpolations are shared: their values cannot depend on which job's
root they hang under. A job that must write into a shared group takes its own copy first
(``own_group``).

The cache is per process (a module dict), so the joblib and Ray launchers, which ship the
loader to worker processes task by task, keep it between tasks on the same worker.
"""

from __future__ import annotations

import copy
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.base import Node

from hardware.fixed_nodes import declare_fixed

_BASES: dict[tuple, tuple[DictConfig, frozenset[str]]] = {}
_PARSED: dict[str, Override] = {}  # an override line -> its parse (ANTLR: ~0.3 ms a line)
# the Hydra node's parts a job writes (its overrides, number, output folder); the others
# without interpolations are shared like the groups
_HYDRA_WRITTEN = frozenset({"job", "runtime", "overrides"})


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
        parsed = _parse(list(sweep_overrides))
        shaping = [o for o in parsed if _changes_defaults(o, self.inner)]
        values = [o for o in parsed if not _changes_defaults(o, self.inner)]
        key = (master_config.hydra.job.config_name,
               tuple(OmegaConf.to_container(master_config.hydra.overrides.hydra)),
               tuple(str(s.path) for s in self.inner.get_sources()),
               tuple(o.input_line for o in shaping))
        if key not in _BASES:
            _BASES[key] = _shareable(self.inner.load_sweep_config(
                master_config, [o.input_line for o in shaping]))
        base, shareable = _BASES[key]
        shared = shareable - {_group(o) for o in values}
        nodes = {name: _node(base, name) for name in shared}
        cfg = copy.deepcopy(base, memo={id(node): node for node in nodes.values()})
        for name, node in nodes.items():  # deepcopy restored the base as their parent
            node._set_parent(_node(cfg, name.rpartition(".")[0]))
        for name in shareable - shared:  # copied from the base, whose nodes are read-only
            OmegaConf.set_readonly(_node(cfg, name), None)
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


def _group(override: Override) -> str:
    """The top-level group a value override writes into (``compile`` of
    ``compile.tiling.tile_m=64``, ``+compile.x=1`` and ``~compile.x``)."""
    return override.key_or_group.split(".")[0]


def _interpolates(node: Node) -> bool:
    """Whether ``node`` or anything under it is an interpolation."""
    if node._is_interpolation():
        return True
    content = node._content if isinstance(node, DictConfig | ListConfig) else None
    children = content.values() if isinstance(content, dict) \
        else content if isinstance(content, list) else ()
    return any(_interpolates(child) for child in children)


def _node(cfg: DictConfig, path: str) -> Any:
    """The node at a dotted path of group names ('' is the root)."""
    node: Any = cfg
    for name in filter(None, path.split(".")):
        node = node._get_node(name)
    return node


def _shareable(base: DictConfig) -> tuple[DictConfig, frozenset[str]]:
    """A composition and the nodes its jobs may share (paths: ``hardware``,
    ``hydra.hydra_logging``): every group but Hydra's, and every part of Hydra's that a job
    does not write, without an interpolation; made read-only here so that no job can
    change another's."""
    hydra = base._get_node("hydra")
    names = [str(k) for k in base if k != "hydra"]
    names += [f"hydra.{k}" for k in hydra if k not in _HYDRA_WRITTEN] if hydra else []
    shareable = frozenset(n for n in names if not _interpolates(_node(base, n)))
    for name in shareable:
        node = _node(base, name)
        OmegaConf.set_readonly(node, True)
        if isinstance(node, DictConfig):
            declare_fixed(node)
    return base, shareable


def _parse(lines: list[str]) -> list[Override]:
    """Hydra's parse of each override line, remembered per process: a grid's jobs repeat
    the same few lines. Override objects are only read after parsing."""
    new = [line for line in dict.fromkeys(lines) if line not in _PARSED]
    if new:
        if len(_PARSED) >= 4096:
            _PARSED.clear()
        _PARSED.update(zip(new, OverridesParser.create().parse_overrides(new), strict=True))
    return [_PARSED[line] for line in lines]


def own_group(cfg: DictConfig, name: str) -> DictConfig:
    """``cfg``'s group ``name``, writable and this job's own: a group shared read-only
    between a sweep's jobs is replaced by a private copy first."""
    node = cfg._get_node(name)
    if node._get_node_flag("readonly"):
        mine = copy.deepcopy(node)
        OmegaConf.set_readonly(mine, None)
        mine._set_parent(cfg)
        # put in place of the shared node, not assigned: assigning to a typed group
        # updates the node that is there, which is the one the other jobs share
        cfg.__dict__["_content"][name] = mine
    return cfg[name]
