"""One measurement row as a function of the free parameters: predicted latency in ms
(and each kernel's predicted time, for per-layer measurements).

The upstream stages (those before the first stage that reads ``hardware``: export,
optimize, quantize in the default chain) run once per row, through the stage cache; each
evaluation re-runs only the stages that read the profile (compile, simulate) on a copy of
the composed config with the parameter values set. Evaluations are memoised by parameter
vector, so the optimizer's repeated points and the leave-one-out fits cost nothing twice.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from pipeline.calibrate.measurements import Measurement
from pipeline.compiler.plan import read_plan
from pipeline.configuration.schema import register_configs
from pipeline.errors import UserError
from pipeline.running.registry import build_chain
from pipeline.running.runner import run_stage

Params = tuple[tuple[str, float], ...]  # ((dotted key, value), ...): hashable


def compose_row(conf_dirs: list[Path], overrides: list[str]) -> DictConfig:
    """The composed config for one row (Hydra's compose API, the CLI's search path)."""
    register_configs()
    primary, *extra = conf_dirs
    search = [f"hydra.searchpath=[{','.join(f'file://{d}' for d in extra)}]"] if extra else []
    with initialize_config_dir(str(primary), version_base="1.3"):
        return compose("config", overrides=[*search, *overrides])


class RowModel:
    """Predicts one row's latency for any parameter vector."""

    def __init__(self, row: Measurement, cfg: DictConfig, work: Path) -> None:
        self.row = row
        self.cfg = cfg
        OmegaConf.update(cfg, "simulate.plots", False)  # hundreds of runs, no one looks
        self.work = work
        self._memo: dict[Params, tuple[float, dict[str, float], list[dict]]] = {}
        chain = build_chain(cfg.stages)
        first = next((i for i, (_, s) in enumerate(chain) if "hardware" in s.config_keys),
                     None)
        if first is None:
            raise UserError("stages.order: no stage reads the hardware profile; there is "
                            "nothing to calibrate")
        self.upstream, self.downstream = chain[:first], chain[first:]
        self.inputs: dict[str, Path] = {}

    def prepare(self, cache_root: Path | None) -> None:
        """Run the stages that do not read the profile, once."""
        self.work.mkdir(parents=True, exist_ok=True)
        with contextlib.redirect_stdout(io.StringIO()):
            for name, stage in self.upstream:
                run_stage(name, stage, dict(self.inputs), self.cfg, self.work, cache_root)
                self.inputs[name] = self.work / name

    def latency_ms(self, params: Params) -> float:
        return self._evaluate(params)[0]

    def kernel_us(self, params: Params) -> dict[str, float]:
        """Each kernel's predicted time (its cost, total_cycles, at the profile's clock)."""
        return self._evaluate(params)[1]

    def kernels(self, params: Params) -> list[dict]:
        """The compiled plan's kernels (name, ops): what measured layers map onto."""
        return self._evaluate(params)[2]

    def _evaluate(self, params: Params) -> tuple[float, dict[str, float], list[dict]]:
        if params not in self._memo:
            self._memo[params] = self._run(params)
        return self._memo[params]

    def typed(self, params: Params) -> Params:
        """The values as the profile holds them: an integer field (dispatch_cycles, lanes)
        takes the rounded value, which is what a prediction uses."""
        return tuple((key, float(round(value)) if isinstance(
            OmegaConf.select(self.cfg.hardware, key), int) else value) for key, value in params)

    def _run(self, params: Params) -> tuple[float, dict[str, float], list[dict]]:
        """Set the values in place (the config was checked at the door; the stages validate
        the profile they build), run, and put the priors back: copying an OmegaConf tree
        per evaluation would cost more than the compile itself."""
        hw = self.cfg.hardware
        saved = {key: OmegaConf.select(hw, key) for key, _ in params}
        try:
            for key, value in self.typed(params):
                OmegaConf.update(hw, key, int(value) if isinstance(saved[key], int) else value)
            with tempfile.TemporaryDirectory(dir=self.work) as tmp, \
                    contextlib.redirect_stdout(io.StringIO()):  # the stages' per-run tables
                run_dir, inputs = Path(tmp), dict(self.inputs)
                metrics: dict = {}
                for name, stage in self.downstream:
                    stage_metrics, _, _ = run_stage(name, stage, inputs, self.cfg, run_dir)
                    metrics.update(stage_metrics)
                    inputs[name] = run_dir / name
                plan_file = run_dir / "compile" / "plan.json"
                plan = read_plan(plan_file) if plan_file.is_file() else None
                mhz = float(self.cfg.hardware.frequency_mhz)
        finally:
            for key, value in saved.items():
                OmegaConf.update(hw, key, value)
        if "latency_ms" not in metrics:
            raise UserError(f"row {self.row.row}: the chain reports no latency_ms")
        planned = plan.kernels if plan is not None else []
        kernels = [{"name": k.name, "ops": k.ops} for k in planned]
        times = {k.name: k.cost.total_cycles / mhz for k in planned}
        return float(metrics["latency_ms"]), times, kernels


def params_of(cfg: DictConfig) -> Params:
    """The profile's prior values of its free parameters."""
    return tuple((f.key, float(OmegaConf.select(cfg.hardware, f.key)))
                 for f in cfg.hardware.calibrate)


def dump(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")
