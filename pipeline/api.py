"""npuflow in-process, for notebooks and search loops: compose a config from the same
overrides the CLI takes, run the chain (with the stage cache), get the metrics back typed.

    from pipeline import api

    result = api.run("model=resnet8_like", "hardware=ethos_u55_256", "quant=int8")
    result.metrics.latency_ms          # typed fields for the headline metrics
    result.metrics["dram_bytes"]       # every metric of metrics.json by name

    evaluator = api.evaluator(result)  # re-cost that compiled plan, many points a second
    evaluator.evaluate({"frequency_mhz": 800, "dram.bandwidth_gbps": 8})

The run is the CLI's (same config, same stages, same checks, same artifacts in
``run_dir``), without Hydra's process-level machinery: no working-directory change, no
logging setup, no run-folder guard. A user mistake raises :class:`pipeline.errors.UserError`
with the CLI's one-line message.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


@dataclass(frozen=True)
class Metrics(Mapping[str, Any]):
    """The headline metrics typed; every other metric of ``metrics.json`` by name
    (``metrics["dram_bytes"]``). Optional fields are None where the run has no such metric
    (no labels, no confidence band)."""

    latency_ms: float
    throughput_fps: float
    energy_mj: float
    cycles_total: int
    dram_bytes: int
    mac_utilization: float
    npu_ops: int
    cpu_ops: int
    latency_ms_low: float | None = None
    latency_ms_high: float | None = None
    output_cosine: float | None = None
    top1_agreement: float | None = None
    all: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, metrics: Mapping[str, Any]) -> Metrics:
        known = {f.name for f in fields(cls)} - {"all"}
        return cls(**{k: metrics.get(k) for k in known}, all=dict(metrics))

    def __getitem__(self, key: str) -> Any:
        return (self.all or {})[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.all or {})

    def __len__(self) -> int:
        return len(self.all or {})


@dataclass(frozen=True)
class Result:
    metrics: Metrics
    run_dir: Path
    config: DictConfig


def compose(*overrides: str, config_dir: str | Path | None = None) -> DictConfig:
    """The config ``npuflow [--config-dir DIR] overrides...`` would run; a bad override is
    a UserError naming it."""
    return _compose(overrides, config_dir)[0]


def _compose(overrides: tuple[str, ...], config_dir: str | Path | None
             ) -> tuple[DictConfig, dict[str, Any]]:
    """The config and Hydra's group choices (which file each group came from)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from pipeline.configuration.schema import register_configs
    from pipeline.errors import UserError

    register_configs()
    extra = [f"hydra.searchpath=[file://{Path(config_dir).resolve()}]"] if config_dir else []
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose("config", overrides=[*extra, *overrides],
                                return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise UserError(f"overrides: {str(exc).splitlines()[0]}") from exc
    choices = dict(cfg.hydra.runtime.choices)
    with _open(cfg):
        del cfg["hydra"]
    return cfg, choices


class _open:
    """Allow deleting a key of a struct config for the block."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg

    def __enter__(self) -> None:
        OmegaConf.set_struct(self.cfg, False)

    def __exit__(self, *exc: object) -> None:
        OmegaConf.set_struct(self.cfg, True)


def run(*overrides: str, run_dir: str | Path | None = None,
        config_dir: str | Path | None = None, plots: bool = False) -> Result:
    """Compose and run the chain into ``run_dir`` (a fresh temporary folder if None);
    ``plots`` draws the PNGs a CLI run draws (off: a search loop rarely looks at them).
    The stage cache is the config's (``run.cache``), as on the command line."""
    from pipeline.configuration.config import checked_values
    from pipeline.running.runner import run_pipeline

    cfg, choices = _compose(overrides, config_dir)
    with _open(cfg):
        if cfg.simulate.get("plots") is None:
            cfg.simulate.plots = plots
    _, resolved = checked_values(cfg, choices, list(overrides))
    folder = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="npuflow-"))
    metrics = run_pipeline(cfg, folder, resolved)
    return Result(Metrics.from_dict(metrics), folder, cfg)


def evaluator(result: Result):  # -> pipeline.evaluator.PlanEvaluator (imported lazily)
    """A :class:`pipeline.evaluator.PlanEvaluator` over ``result``'s compiled plan."""
    from pipeline.evaluator import PlanEvaluator

    return PlanEvaluator.from_result(result)
