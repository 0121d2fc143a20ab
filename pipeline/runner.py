"""Runs the chain: each stage gets the folders of the stages before it and its own config
subtree, writes into a temp folder that is renamed into place, and contributes metrics to
the run's flat ``metrics.json``."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.artifacts import replace_dir, write_json
from pipeline.registry import build_chain
from pipeline.stages.base import Stage, StageInputs

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"


def stage_config(cfg: DictConfig, stage: Stage) -> DictConfig:
    """The slice of the config a stage may read: its declared groups plus ``run``."""
    keys = [k for k in (*stage.config_keys, "run") if k in cfg]
    return OmegaConf.masked_copy(cfg, keys)


def run_stage(name: str, stage: Stage, inputs: StageInputs, cfg: DictConfig,
              run_dir: Path) -> dict[str, Any]:
    final = run_dir / name
    tmp = run_dir / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        start = time.perf_counter()
        result = stage.run(dict(inputs), stage_config(cfg, stage), tmp)
        metrics = dict(result.metrics)
        write_json(tmp / METRICS_FILE, metrics)
        replace_dir(tmp, final)
        log.info("stage %s done in %.2f s", name, time.perf_counter() - start)
        return metrics
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_pipeline(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    chain = build_chain(cfg.stages)
    run_dir.mkdir(parents=True, exist_ok=True)
    inputs: StageInputs = {}
    metrics: dict[str, Any] = {}
    columns = (TextColumn("[bold]{task.description}"), BarColumn(),
               TextColumn("{task.fields[stage]}"), TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("npuflow", total=len(chain), stage="")
        for name, stage in chain:
            progress.update(task, stage=name)
            metrics.update(run_stage(name, stage, inputs, cfg, run_dir))
            inputs[name] = run_dir / name
            progress.advance(task)
    write_json(run_dir / METRICS_FILE, metrics)
    return metrics
