"""Runs the chain: each stage gets the folders of the stages before it and its own config
subtree, writes into a temp folder that is renamed into place, and contributes metrics to
the run's flat ``metrics.json``."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rich.progress import Progress

from hardware.fixed_nodes import declare_fixed
from pipeline import cache
from pipeline.artifacts import replace_dir, write_json
from pipeline.errors import UserError
from pipeline.reports.terminal import CONSOLE, PROGRESS_COLUMNS, live_progress
from pipeline.running import interrupt, user_code
from pipeline.running.registry import build_chain
from pipeline.stages.base import Stage, StageInputs

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"


def stage_config(cfg: DictConfig, stage: Stage, resolved: dict | None = None
                 ) -> tuple[DictConfig, dict | None]:
    """The slice of the config a stage may read (its declared groups plus ``run``,
    read-only) and the slice's resolved values (None when it does not resolve; the stage
    reports that). Slices are shared per process by content, and so is each group inside
    them: in a sweep every job's export, optimize and quantize read the same slice, and a
    compile x simulate grid's slices differ in one small group while sharing the hardware
    profile, whose node costs ~15 ms to build (most of a slice). ``resolved`` is the whole
    config's values, resolved once per run by the caller."""
    keys = [k for k in (*stage.config_keys, "run") if k in cfg]
    try:
        if resolved is None:
            resolved = OmegaConf.to_container(cfg, resolve=True)
        values = {k: resolved[k] for k in keys}
        parts = {k: json.dumps(values[k], sort_keys=True, default=str) for k in keys}
    except OmegaConfBaseException:
        return OmegaConf.masked_copy(cfg, keys), None
    content = json.dumps(parts, sort_keys=True)
    if content not in _SLICES:
        if len(_SLICES) >= 256:
            _SLICES.clear()
            _GROUPS.clear()
        # made from the resolved values, not masked out of the whole config: a key of the
        # slice may interpolate one outside it (a language model's graph is built at
        # ``${simulate.llm.prompt_tokens}``), which a masked copy could no longer resolve
        sub = OmegaConf.create({})
        sub._set_flag("no_deepcopy_set_nodes", True)  # the group nodes are shared as built
        for k in keys:
            sub[k] = _group_node(k, parts[k], values[k])
        sub._set_flag("no_deepcopy_set_nodes", None)
        OmegaConf.set_readonly(sub, True)
        _SLICES[content] = sub
    return _SLICES[content], values


def _group_node(key: str, content: str, value: Any) -> Any:
    """One group's read-only node, built once per content. Several slices hold the same
    node: it has no interpolations left (made from resolved values), so which slice is its
    parent changes nothing a stage can read."""
    if (key, content) not in _GROUPS:
        node = OmegaConf.create({key: value})._get_node(key)
        OmegaConf.set_readonly(node, True)
        if isinstance(node, DictConfig):
            declare_fixed(node)
        _GROUPS[key, content] = node
    return _GROUPS[key, content]


_SLICES: dict[str, DictConfig] = {}
_GROUPS: dict[tuple[str, str], Any] = {}


# a full disk, a quota, a file-size limit (ulimit -f), a read-only mount: the folder's
# fault, not npuflow's, and one line names it
DISK_ERRORS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})


@contextmanager
def _writing(where: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_ERRORS:
            raise
        file = f" ({exc.filename})" if exc.filename else ""
        raise UserError(f"{where}: {exc.strerror or os.strerror(exc.errno)}{file}") from exc


def _run(name: str, stage: Stage, inputs: StageInputs, sub: DictConfig, out: Path) -> Any:
    """A built-in stage runs as is (its bugs keep their tracebacks); a user's component's
    exception is one line naming the component, the exception and its line."""
    if type(stage).__module__.split(".")[0] in user_code.OWN_PACKAGES:
        return stage.run(dict(inputs), sub, out)
    return user_code.call(f"stages.{name}._target_", type(stage).__qualname__, stage.run,
                          dict(inputs), sub, out)


def run_stage(name: str, stage: Stage, inputs: StageInputs, cfg: DictConfig,
              run_dir: Path, cache_root: Path | None = None, resolved: dict | None = None
              ) -> tuple[dict[str, Any], str, float]:
    """Run (or restore from the cache) one stage; returns its metrics, hit/miss/off and
    its wall seconds. ``resolved``: the config's values, if the caller has them."""
    final = run_dir / name
    tmp = run_dir / f".{name}.tmp-{os.getpid()}"
    for stale in run_dir.glob(f".{name}.tmp-*"):  # left by a killed run: never trusted
        shutil.rmtree(stale, ignore_errors=True)
    start = time.perf_counter()
    try:
        tmp.mkdir(parents=True)
        sub, values = stage_config(cfg, stage, resolved)
        key = cache.stage_key(name, stage, sub, inputs, cache_root, values) \
            if cache_root else None
        lock = cache.locked(cache_root, name, key) if cache_root and key else nullcontext()
        with lock:
            cached = cache.lookup(cache_root, name, key) if cache_root and key else None
            if cached is not None:
                with _writing(f"stage {name}: restoring from run.cache_dir into {run_dir}"):
                    cache.restore(cached, tmp)
                metrics = json.loads((tmp / METRICS_FILE).read_text())
                status = "hit"
            else:
                with _writing(f"stage {name}: writing into {run_dir}"):
                    result = _run(name, stage, inputs, sub, tmp)
                    metrics = dict(result.metrics)
                    write_json(tmp / METRICS_FILE, metrics)
                interrupt.check()  # a library may have swallowed it: never keep this result
                if cache_root and key:
                    with _writing(f"run.cache_dir '{cache_root}': storing stage {name}"):
                        cache.store(cache_root, name, key, tmp)
                status = "miss" if cache_root else "off"
        interrupt.check()
        replace_dir(tmp, final)
        seconds = time.perf_counter() - start
        log.info("stage %s %s in %.2f s", name,
                 "restored from cache" if status == "hit" else "done", seconds)
        return metrics, status, seconds
    except interrupt.Interrupted as exc:
        exc.where = exc.where or f"stage {name}"
        raise
    except Exception as exc:
        stopped = interrupt.pending()  # a library turned the interrupt into its own error
        if stopped is None:
            raise
        stopped.where = f"stage {name}"
        raise stopped from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_pipeline(cfg: DictConfig, run_dir: Path, resolved: dict | None = None
                 ) -> dict[str, Any]:
    """Run the chain into ``run_dir``; ``resolved``: the config's values, if the caller
    resolved them already (``checked_values``)."""
    chain = build_chain(cfg.stages)
    run_dir.mkdir(parents=True, exist_ok=True)
    inputs: StageInputs = {}
    metrics: dict[str, Any] = {}
    statuses: dict[str, str] = {}
    seconds: dict[str, float] = {}
    cache_root = Path(cfg.run.cache_dir) if cfg.run.get("cache", False) else None
    if resolved is None:
        try:
            resolved = OmegaConf.to_container(cfg, resolve=True)  # once per run
        except OmegaConfBaseException:
            resolved = None
    # a quiet console (a sweep job) shows no display: starting one cost ~3 ms a job
    with Progress(*PROGRESS_COLUMNS, transient=True, console=CONSOLE,
                  disable=CONSOLE.quiet) as progress, \
            live_progress(progress):
        task = progress.add_task("npuflow", total=len(chain), stage="")
        for name, stage in chain:
            progress.update(task, stage=name)
            stage_metrics, statuses[name], seconds[name] = run_stage(
                name, stage, inputs, cfg, run_dir, cache_root, resolved)
            metrics.update(stage_metrics)
            inputs[name] = run_dir / name
            progress.advance(task)
    with _writing(f"writing {run_dir}"):
        write_json(run_dir / METRICS_FILE, metrics)
        # kept out of metrics.json, which must be byte-identical for the same config
        write_json(run_dir / "cache.json", statuses)
        write_json(run_dir / "timings.json", {k: round(v, 4) for k, v in seconds.items()})
    return metrics
