"""Multirun summary: one table, a Pareto plot and the best point per objective.

A Hydra callback (``hydra.callbacks.sweep_summary`` in conf/config.yaml). It reads the job
folders, not in-memory job returns, so it works with any launcher, including joblib whose
jobs run in other processes. Writes ``summary.csv``, ``summary.md`` and ``pareto.png``
(latency vs energy, coloured by accuracy; ringed: Pareto-optimal in latency, energy and
accuracy together) into the sweep dir.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from pipeline.artifacts import save_figure, write_csv, write_text

COLUMNS = ("latency_ms", "throughput_fps", "energy_mj", "mac_utilization", "sram_hit_rate",
           "dram_bytes", "accuracy_top1", "top1_agreement", "output_cosine", "cpu_ops")
OBJECTIVES = {"latency_ms": min, "energy_mj": min, "throughput_fps": max,
              "output_cosine": max, "accuracy_top1": max}


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for job in sorted((p for p in sweep_dir.iterdir() if (p / "metrics.json").is_file()),
                      key=lambda p: (len(p.name), p.name)):
        metrics = json.loads((job / "metrics.json").read_text())
        overrides_file = job / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.exists() else []
        cache_file = job / "cache.json"
        row = {"job": job.name, "overrides": " ".join(overrides or []),
               **{c: metrics.get(c) for c in COLUMNS}}
        if cache_file.exists():
            row["cache"] = json.loads(cache_file.read_text())
        rows.append(row)
    return _only_swept_keys(rows)


def _only_swept_keys(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep in ``overrides`` only the keys whose values differ between jobs."""
    parsed = [dict(o.split("=", 1) for o in r["overrides"].split() if "=" in o) for r in rows]
    keys = sorted({k for p in parsed for k in p})
    varying = [k for k in keys if len({p.get(k) for p in parsed}) > 1]
    for row, p in zip(rows, parsed, strict=True):
        row["overrides"] = " ".join(f"{k}={p[k]}" for k in varying if k in p)
    return rows


def _accuracy(row: dict[str, Any]) -> float | None:
    value = row.get("accuracy_top1")
    return value if value is not None else row.get("output_cosine")


def pareto(rows: list[dict[str, Any]]) -> list[bool]:
    """Non-dominated points: minimise latency and energy, maximise accuracy (when known)."""
    pts = [(r.get("latency_ms"), r.get("energy_mj"), -(_accuracy(r) or 0.0)) for r in rows]

    def dominates(p: tuple, q: tuple) -> bool:
        return all(a <= b for a, b in zip(p, q, strict=True)) and p != q

    return [None not in p and not any(None not in q and dominates(q, p) for q in pts)
            for p in pts]


def write_summary(sweep_dir: Path, rows: list[dict[str, Any]]) -> dict[str, dict]:
    flags = pareto(rows)
    fields = ["job", "overrides", *COLUMNS, "pareto"]
    write_csv(sweep_dir / "summary.csv",
              [{**row, "pareto": flag} for row, flag in zip(rows, flags, strict=True)], fields)
    lines = ["| job | overrides | latency ms | energy mJ | fps | accuracy | pareto |",
             "|---|---|---|---|---|---|---|"]
    for row, flag in zip(rows, flags, strict=True):
        acc = _accuracy(row)
        lines.append(f"| {row['job']} | {row['overrides']} | {_f(row['latency_ms'])} | "
                     f"{_f(row['energy_mj'])} | {_f(row['throughput_fps'])} | {_f(acc)} | "
                     f"{'*' if flag else ''} |")
    write_text(sweep_dir / "summary.md", "\n".join(lines) + "\n")
    _plot(rows, flags, sweep_dir / "pareto.png")
    best = {}
    for metric, pick in OBJECTIVES.items():
        valid = [r for r in rows if r.get(metric) is not None]
        if valid:
            winner = pick(valid, key=lambda r, m=metric: r[m])
            best[metric] = {"job": winner["job"], "value": winner[metric],
                            "overrides": winner["overrides"]}
    return best


def _f(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}"


def _plot(rows: list[dict[str, Any]], flags: list[bool], path: Path) -> None:
    pts = [(r["latency_ms"], r["energy_mj"], _accuracy(r), f)
           for r, f in zip(rows, flags, strict=True)
           if r.get("latency_ms") is not None and r.get("energy_mj") is not None]
    fig, ax = plt.subplots(figsize=(7, 5))
    if pts:
        colour = [p[2] if p[2] is not None else 0.0 for p in pts]
        sc = ax.scatter([p[0] for p in pts], [p[1] for p in pts], c=colour, cmap="viridis",
                        s=40)
        fig.colorbar(sc, ax=ax, label="accuracy (top-1 or output cosine)")
        front = [p for p in pts if p[3]]
        ax.scatter([p[0] for p in front], [p[1] for p in front], s=220, facecolors="none",
                   edgecolors="#d62728", linewidths=1.5,
                   label="Pareto-optimal (latency, energy, accuracy)")
        ax.legend()
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("energy per inference (mJ)")
    ax.set_title(f"sweep: {len(rows)} points")
    fig.tight_layout()
    save_figure(fig, path)


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return
        rows = collect(sweep_dir)
        if not rows:
            return
        best = write_summary(sweep_dir, rows)
        table = Table(title=f"sweep summary: {sweep_dir} ({len(rows)} jobs)")
        for col in ("objective", "best", "job", "overrides"):
            table.add_column(col)
        for metric, b in best.items():
            table.add_row(metric, _f(b["value"]), b["job"], b["overrides"])
        Console().print(table)
