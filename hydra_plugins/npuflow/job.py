"""One sweep job, as Hydra's ``hydra.core.utils.run_job`` runs it, at a fraction of its cost.

The contract is Hydra's: the job's ``HydraConfig``, its output folder, the working-directory
change when ``hydra.job.chdir`` asks for it, the job's logging, ``.hydra/config.yaml``,
``hydra.yaml`` and ``overrides.yaml``, ``hydra.job.env_set``, the callbacks'
``on_job_start``/``on_job_end`` and a ``JobReturn``. What differs is cost: Hydra writes the
three files with OmegaConf's pure-Python YAML emitter (~60 ms a job, more than compiling
and simulating mobilenet_v2 with fixed tiles), deep-copies the whole config for the task's
part and copies the Hydra node twice (``set_config``). Here the job's config, a fresh
composition that nothing else holds, gives its own nodes to the task's config and to
``HydraConfig``, and the files are written by libyaml from plain containers, with
OmegaConf's quoting rule (a string that reads back as a bool, int or float is quoted), so
``OmegaConf.load`` reads back the same values. tests/test_sweep_points.py compares the
files with Hydra's.
"""

# no ``from __future__ import annotations``: Hydra's plugin scan runs this module outside
# sys.modules
import os
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (
    JobReturn,
    JobRuntime,
    JobStatus,
    _flush_loggers,
    configure_log,
    env_override,
)
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write
from omegaconf._utils import is_float, is_int, yaml_is_bool

from hardware.fixed_nodes import remembered

_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_DUMPER):  # type: ignore[misc, valid-type]
    """libyaml's emitter with OmegaConf's string rule (omegaconf._utils.get_omega_conf_dumper)."""


def _str(dumper: Any, data: str) -> Any:
    quoted = yaml_is_bool(data) or is_int(data) or is_float(data)
    return dumper.represent_scalar(yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG, data,
                                   style="'" if quoted else None)


_Dumper.add_representer(str, _str)


def to_yaml(node: Any) -> str:
    """What ``OmegaConf.to_yaml(node)`` writes (unresolved, enums by name), by libyaml."""
    data = OmegaConf.to_container(node, enum_to_str=True) if OmegaConf.is_config(node) \
        else node
    return yaml.dump(data, Dumper=_Dumper, default_flow_style=False, allow_unicode=True,
                     sort_keys=False)


def _save(node: Any, name: str, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(to_yaml(node), encoding="utf-8")


def config_yaml(task: DictConfig) -> str:
    """``to_yaml(task)``, group by group: a top-level mapping's YAML is its entries' YAML
    one after another, and a group the sweep's jobs share read-only
    (``pipeline.sweeps.sweep_compose``, declared in ``hardware.fixed_nodes``) cannot
    change, so its text is written once per process (the hardware profile's is ~2.6 ms, a
    twentieth of a point)."""
    nodes = {str(key): task._get_node(key) for key in task}
    if not nodes or not all(isinstance(n, DictConfig | ListConfig) for n in nodes.values()):
        return to_yaml(task)
    return "".join(remembered(node, f"config.yaml {key}", lambda key=key, node=node: to_yaml(
        {key: OmegaConf.to_container(node, enum_to_str=True)})) for key, node in nodes.items())


def task_config(config: DictConfig) -> DictConfig:
    """The job's config without the Hydra node. Its groups are the job config's own nodes,
    moved under a new root, not copied: every config a launcher hands to ``run_job`` is
    that job's own fresh composition, used for nothing else (Hydra deep-copies the whole
    config, then deletes the Hydra node; a masked copy cost ~30 ms a job)."""
    task = DictConfig(content={}, flags={"no_deepcopy_set_nodes": True})
    for key in config:
        if key != "hydra":
            task[key] = config._get_node(key)
    task._set_flag("no_deepcopy_set_nodes", None)
    return task


def _set_hydra_config(config: DictConfig) -> None:
    """``HydraConfig.set_config`` without its copy of the Hydra node: the job's config is
    its own (see ``task_config``), so ``HydraConfig`` can show that very node, read-only and
    parented to the whole config (interpolations from the Hydra node into the task's keys
    resolve, as in Hydra's)."""
    OmegaConf.set_readonly(config.hydra, True)
    node = config._get_node("hydra")
    view = DictConfig(content={}, flags={"no_deepcopy_set_nodes": True})
    view["hydra"] = node
    view._set_flag("no_deepcopy_set_nodes", None)
    node._set_parent(config)
    HydraConfig.instance().cfg = view  # type: ignore[assignment]


def run_job(task_function: TaskFunction, config: DictConfig, job_dir_key: str,
            job_subdir_key: str | None, hydra_context: HydraContext) -> JobReturn:
    callbacks = hydra_context.callbacks
    old_cwd = os.getcwd()
    orig_hydra_cfg = HydraConfig.instance().cfg
    _set_hydra_config(config)
    output_dir = str(OmegaConf.select(config, job_dir_key))
    if job_subdir_key is not None:
        output_dir = os.path.join(output_dir, str(OmegaConf.select(config, job_subdir_key)))
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = os.path.abspath(output_dir)
    chdir = bool(config.hydra.job.chdir)  # None means False since Hydra 1.2
    try:
        ret = JobReturn()
        task_cfg = task_config(config)
        ret.cfg = task_cfg
        hydra_cfg = HydraConfig.instance().cfg
        ret.hydra_cfg = hydra_cfg
        ret.overrides = list(OmegaConf.to_container(config.hydra.overrides.task))
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        if chdir:
            os.chdir(output_dir)
        ret.working_dir = output_dir if chdir else os.getcwd()
        configure_log(config.hydra.job_logging, config.hydra.verbose)
        if config.hydra.output_subdir is not None:
            folder = Path(config.hydra.runtime.output_dir) / str(config.hydra.output_subdir)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.yaml").write_text(config_yaml(task_cfg), encoding="utf-8")
            _save(hydra_cfg, "hydra.yaml", folder)
            _save(config.hydra.overrides.task, "overrides.yaml", folder)
        with env_override(hydra_cfg.hydra.job.env_set):
            callbacks.on_job_start(config=config, task_function=task_function)
            try:
                ret.return_value = task_function(task_cfg)
                ret.status = JobStatus.COMPLETED
            except Exception as exc:
                ret.return_value = exc
                ret.status = JobStatus.FAILED
        ret.task_name = JobRuntime.instance().get("name")
        _flush_loggers()
        callbacks.on_job_end(config=config, job_return=ret)
        return ret
    finally:
        HydraConfig.instance().cfg = orig_hydra_cfg
        if chdir:
            os.chdir(old_cwd)

