"""The simulate stage's three PNGs, drawn from a run folder's own artifacts.

A sweep job skips its plots (they were most of a cached job's time); the sweep summary
draws them afterwards for the jobs it picks, and ``python -m pipeline.simulator.plots
RUN_DIR ...`` draws them for any job on demand. Both read what simulate wrote (plan.json,
timeline.json, layers.csv) and the job's composed config, so a plot drawn later is the
plot the run would have drawn.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

from omegaconf import OmegaConf

from hardware.profile import HardwareProfile, profile_from_config
from pipeline.artifacts import read_csv
from pipeline.compiler.plan import Plan, read_plan
from pipeline.reports.figures import Figure, draw_all
from pipeline.simulator import report
from pipeline.simulator.timeline import Task

LAYER_NUMBERS = ("macs", "compute_cycles", "memory_cycles", "overhead_cycles", "total_cycles")


def figures(tasks: list[Task], rows: list[dict], plan: Plan, profile: HardwareProfile,
            latency_ms: float, out_dir: Path) -> list[Figure]:
    """The three plots, each a function that draws it (``figures.draw_all`` runs them)."""
    title = f"{plan.graph} on {profile.name}: {latency_ms:.3f} ms"
    return [partial(report.plot_timeline, tasks, out_dir / "timeline.png",
                    profile.frequency_mhz, title),
            partial(report.plot_roofline, plan, profile, out_dir / "roofline.png"),
            partial(report.plot_layers, rows, out_dir / "layers.png")]


def draw(tasks: list[Task], rows: list[dict], plan: Plan, profile: HardwareProfile,
         latency_ms: float, out_dir: Path) -> None:
    draw_all(figures(tasks, rows, plan, profile, latency_ms, out_dir))


def draw_run(run_dir: Path) -> Path:
    """Draw a finished run's plots into its simulate/ folder; returns that folder."""
    draw_all(run_figures(run_dir))
    return run_dir / "simulate"


def run_figures(run_dir: Path) -> list[Figure]:
    """A finished run's plots, from its own artifacts, as ``figures`` gives them."""
    sim = run_dir / "simulate"
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    plan = read_plan(run_dir / "compile" / "plan.json")
    tasks = [Task(t["name"], t["resource"], t["end"] - t["start"], category=t["category"],
                  start=t["start"], end=t["end"])
             for t in json.loads((sim / "timeline.json").read_text())]
    rows = [{**r, **{k: int(r[k]) for k in LAYER_NUMBERS}}
            for r in read_csv(sim / "layers.csv")]
    latency = json.loads((run_dir / "metrics.json").read_text())["latency_ms"]
    return figures(tasks, rows, plan, profile_from_config(cfg.hardware), latency, sim)


def main(argv: list[str] | None = None) -> None:
    runs = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not runs:
        print("usage: python -m pipeline.simulator.plots RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        sys.exit(2)
    for run in runs:
        missing = [p for p in (run / ".hydra" / "config.yaml", run / "compile" / "plan.json",
                               run / "simulate" / "timeline.json") if not p.is_file()]
        if missing:
            print(f"{run}: not a finished npuflow run ({missing[0]} is missing)", file=sys.stderr)
            sys.exit(2)
        print(draw_run(run))


if __name__ == "__main__":
    main()
