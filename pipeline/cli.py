"""``npuflow`` / ``python -m pipeline``: the Hydra app, and one-line errors for user mistakes.

Hydra prints composition errors over several lines with a hint about HYDRA_FULL_ERROR. We
let Hydra raise instead (by setting HYDRA_FULL_ERROR for its runner), then print one line
naming the file or key at fault and exit 2. A user who sets HYDRA_FULL_ERROR=1 gets the
full traceback, as Hydra documents.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console
from rich.table import Table

from pipeline.artifacts import write_json
from pipeline.configuration.config import checked_values
from pipeline.configuration.config_files import check_user_configs
from pipeline.configuration.schema import register_configs
from pipeline.configuration.schema_keys import all_keys, did_you_mean
from pipeline.errors import UserError, UserStop
from pipeline.html_report import write_run_report
from pipeline.reports.terminal import set_quiet
from pipeline.running import interrupt
from pipeline.running.hydra_mode import composed_once
from pipeline.running.run_folder import release_claimed
from pipeline.running.runner import DISK_ERRORS, run_pipeline
from pipeline.sweeps.sweep import JOB_LINE, POINT_FILE
from pipeline.sweeps.sweep_compose import own_group

log = logging.getLogger("npuflow")
register_configs()
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


# the figures a run answers with, first in the summary: a language model's, or a network's
LLM_HEADLINE = ("ttft_ms", "prefill_tokens_per_s", "decode_tokens_per_s", "memory_mb",
                "perplexity_change_pct")
HEADLINE = ("latency_ms", "latency_ms_low", "latency_ms_high", "throughput_fps", "energy_mj",
            "avg_power_w", "accuracy", "output_cosine")


def _print_summary(metrics: dict, run_dir: Path) -> None:
    """Every metric, the headline ones first (in bold), then the rest by name."""
    table = Table(title=f"npuflow: {run_dir}", show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    first = [k for k in (LLM_HEADLINE if "ttft_ms" in metrics else HEADLINE) if k in metrics]
    for key in [*first, *sorted(set(metrics) - set(first))]:
        value = metrics[key]
        text = f"{value:,.6g}" if isinstance(value, float) else str(value)
        table.add_row(key, text if len(text) < 60 else text[:57] + "...",
                      style="bold" if key in first else None)
    Console().print(table)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def app(cfg: DictConfig) -> dict | float | list[float] | None:
    logging.captureWarnings(True)  # other libraries' warnings: the log file (OwnRecords)
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.MULTIRUN:
        return sweep_job(cfg, hc, run_dir)
    try:
        _, resolved = checked_values(cfg, dict(hc.runtime.choices), list(hc.overrides.task))
        metrics = run_pipeline(cfg, run_dir, resolved)
    except Exception as exc:
        _exit_if_user_error(exc)
        raise
    write_run_report(run_dir)
    _print_summary(metrics, run_dir)
    return objective_value(cfg, metrics)


def objective_value(cfg: DictConfig, metrics: dict) -> dict | float | list[float]:
    """What a search sweeper (Optuna) optimises: one metric, or a list of them."""
    objective = cfg.run.get("objective")
    if not objective:
        return metrics
    names = [objective] if isinstance(objective, str) else list(objective)
    unknown = [n for n in names if n not in metrics]
    if unknown:
        raise UserError(f"run.objective: '{unknown[0]}' is not a metric of this run")
    values = [float(metrics[n]) for n in names]
    return values[0] if isinstance(objective, str) else values


def _failed_objective(cfg: DictConfig, hc: Any) -> float | list[float] | None:
    """The worst value of each objective for a point that did not run: +inf where the
    search minimises, -inf where it maximises. Optuna then keeps the trial as dominated by
    every point that ran and samples on; NaN would be told as a failure, which
    hydra-optuna-sweeper 1.3 re-tells with values and crashes the search, and an exception
    stops it. summary.csv still records the point as infeasible."""
    objective = cfg.run.get("objective")
    if not objective:
        return None
    names = [objective] if isinstance(objective, str) else list(objective)
    directions = hc.sweeper.get("direction") or "minimize"
    if isinstance(directions, str):
        directions = [directions] * len(names)
    worst = [-math.inf if str(d).endswith("maximize") else math.inf for d in directions]
    return worst[0] if isinstance(objective, str) else worst


def sweep_job(cfg: DictConfig, hc: Any, run_dir: Path) -> dict | float | list[float] | None:
    """One point of a multirun: quiet stages, no plots unless asked, one line out. A point
    that cannot run (tiles over SRAM, an op the profile refuses, a bad value) is recorded
    in ``point.json`` with its reason and the sweep goes on; so is a crash, with its
    traceback in the job's log."""
    set_quiet(True)
    for handler in logging.getLogger().handlers:  # the job's log file keeps every line
        if not isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.WARNING)
    job = f"#{hc.job.num} {' '.join(hc.overrides.task)}"
    if cfg.simulate.get("plots") is None:
        own_group(cfg, "simulate").plots = False
    try:
        _, resolved = checked_values(cfg, dict(hc.runtime.choices), list(hc.overrides.task))
        metrics = run_pipeline(cfg, run_dir, resolved)
        value = objective_value(cfg, metrics)
    except Exception as exc:
        message = describe(exc)
        status = "infeasible" if message is not None else "error"
        if message is None:
            log.exception("sweep point %s crashed", job)
            message = f"{type(exc).__name__}: {exc}"
        write_json(run_dir / POINT_FILE, {"status": status, "reason": message})
        print(f"{job}: {status}: {message}", file=sys.stderr, flush=True)
        return _failed_objective(cfg, hc)
    write_json(run_dir / POINT_FILE, {"status": "ok", "reason": ""})
    write_run_report(run_dir)
    print(f"{job}: " + ", ".join(f"{k} {metrics[k]:.4g}" for k in JOB_LINE if k in metrics),
          flush=True)
    return value


_WANTS_TRACEBACK = os.environ.get("HYDRA_FULL_ERROR") == "1"


def _exit_if_user_error(exc: BaseException) -> None:
    """Print one line and exit for a user mistake; return (to re-raise) for a bug. The
    run folder is given back if no stage wrote into it (``run_folder.release``), so the
    corrected run can use it."""
    message = describe(exc)
    if message is None or _WANTS_TRACEBACK:
        return
    release_claimed()
    print(f"npuflow: error: {message}", file=sys.stderr)
    sys.exit(getattr(exc, "exit_code", 2))


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return seen


def _yaml_error(exc: BaseException) -> str | None:
    """A YAML syntax error in a config or profile: file, line and column of the problem."""
    err = next((e for e in _chain(exc) if isinstance(e, yaml.MarkedYAMLError)), None)
    if err is None:
        return None
    mark = err.problem_mark or err.context_mark
    where = f"{mark.name}:{mark.line + 1}:{mark.column + 1}" if mark else "config"
    return f"{where}: YAML error: {err.problem or err.context}"


def _group_override(argv: list[str]) -> str | None:
    """Hydra's ValueError for ``hardware=nan``: a group choice that its override grammar
    reads as a number."""
    groups = {p.name for p in Path(CONF_DIR).iterdir() if p.is_dir()}
    parser = OverridesParser.create()
    for arg in argv:
        if arg.partition("=")[0] not in groups:
            continue
        value = parser.parse_override(arg).value()
        if not isinstance(value, str | list):
            return (f"override '{arg}': a {arg.partition('=')[0]} choice names a YAML file, "
                    f"and this value reads as a {type(value).__name__}")
    return None


def describe(exc: BaseException) -> str | None:
    """One line for a user mistake, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, UserError):
        return str(exc)
    yaml_problem = _yaml_error(exc)
    if yaml_problem:
        return yaml_problem
    if isinstance(exc, ValueError) and str(exc).startswith("Config group override must be"):
        return _group_override(sys.argv[1:]) or " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.filename:  # e.g. a run folder under a file
        return f"{exc.filename}: {exc.strerror or type(exc).__name__}"
    if isinstance(exc, OSError) and exc.errno in DISK_ERRORS:  # a write without a name
        return f"writing the run's files: {exc.strerror or os.strerror(exc.errno)}"
    if isinstance(exc, MissingConfigException):
        first = str(exc).strip().splitlines()[0]
        options = getattr(exc, "options", None)
        if not options:
            return first
        missing = re.search(r"Could not find '(?:[\w/]+/)?([^'/]+)'", first)
        hint = did_you_mean(missing.group(1), list(options)) if missing else ""
        return f"{first}{hint} (available: {', '.join(options)})"
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else None
    if isinstance(exc, OmegaConfBaseException) or cause is not None:
        err = cause or exc
        text = str(err).strip()
        full_key = getattr(err, "full_key", None)
        m = re.search(r"full_key: (\S+)", text)
        key = full_key or (m.group(1) if m else None)
        head = text.splitlines()[0]
        where = ""
        if isinstance(exc, HydraException) and exc is not err:
            where = " ".join(str(exc).split())
            where = f" [{where[:160]}]" if where else ""
        if key and "not in" in head:  # a misspelt key: the closest ones the schema has
            typed = next((o.partition("=")[0].lstrip("+~") for o in sys.argv[1:]
                          if o.partition("=")[0].lstrip("+~").startswith(key)), key)
            hint = did_you_mean(typed, all_keys())
            if hint:
                return f"config error at '{key}': {head}{hint}"
        return f"config error at '{key}': {head}{where}" if key else f"config error: {head}{where}"
    composing = re.match(r"In '([^']+)': \w+ raised while composing config:\s*(.*)",
                         str(exc), re.S)
    if composing:
        source, detail = composing.groups()
        m = re.search(r"full_key: (\S+)", detail)
        head = detail.strip().splitlines()[0]
        key = f" at '{m.group(1)}'" if m else ""
        return f"{source}.yaml: config error{key}: {head}"
    if isinstance(exc, HydraException):
        text = " ".join(str(exc).split())
        return re.sub(r",? ?set env var HYDRA_FULL_ERROR=1 to see chained exception\.?", "", text)
    return None


_CONFIG_DIR_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")


def options_first(argv: list[str]) -> list[str]:
    """Hydra's argument parser takes its options only before the overrides (argparse stops
    at the first positional); a user writes ``--config-dir DIR`` anywhere, so options and
    their values move to the front, in order, and the overrides keep theirs."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _CONFIG_DIR_FLAGS and i + 1 < len(argv):
            front += argv[i:i + 2]
            i += 2
            continue
        (front if arg.split("=", 1)[0] in _CONFIG_DIR_FLAGS else rest).append(arg)
        i += 1
    return front + rest


def main() -> None:
    sys.argv[1:] = options_first(sys.argv[1:])
    os.environ["HYDRA_FULL_ERROR"] = "1"  # make Hydra raise; we print the one line
    logging.raiseExceptions = False  # a full disk under the log file: not a traceback a line
    with interrupt.handled():
        try:
            check_user_configs(sys.argv[1:])
            with composed_once(sys.argv[1:], Path(CONF_DIR)):
                app()
        except interrupt.Interrupted as exc:
            interrupt.exit_for(exc)
        except UserStop as stop:
            _exit_if_user_error(stop.error)
            raise
        except Exception as exc:
            stopped = interrupt.pending()  # outside a stage, turned into a library's error
            if stopped is not None:
                interrupt.exit_for(stopped)
            _exit_if_user_error(exc)
            raise
