"""Multirun summary: one table, a Pareto plot and the best point per objective.

A Hydra callback (``hydra.callbacks.sweep_summary`` in conf/config.yaml). It reads the job
folders, not in-memory job returns, so it works with any launcher, including joblib and
Ray whose jobs run in other processes. Writes ``summary.csv``, ``summary.md`` and
``pareto.png`` (latency vs energy, coloured by accuracy; ringed: Pareto-optimal in latency,
energy and accuracy together) into the sweep dir. Every point has a row: an infeasible or
crashed one with its status and reason (``point.json``, written by the job). The picked
jobs (best per objective) get their simulate plots drawn; the sweep exits non-zero when no
point ran.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from pipeline.artifacts import pyplot, save_figure, write_csv, write_text
from pipeline.html_report import write_run_report, write_sweep_report
from pipeline.reports.figures import Figure, draw_all
from pipeline.simulator.plots import run_figures

COLUMNS = ("latency_ms", "throughput_fps", "throughput_ips", "energy_mj", "energy_mj_per_image",
           "mac_utilization", "sram_hit_rate",
           "dram_bytes", "accuracy", "accuracy_top1", "top1_agreement", "output_cosine",
           "cpu_ops",
           "sustained_latency_ms", "sustained_fps", "sustained_power_w", "throttle_onset_s",
           "peak_temperature_c",  # the sustained_* columns: with simulate.sustained.seconds
           # a language model's (model=llm): its latency_ms is the time per generated token
           "ttft_ms", "decode_tokens_per_s", "memory_mb", "perplexity_change_pct")
OBJECTIVES = {"latency_ms": min, "energy_mj": min, "throughput_fps": max,
              "output_cosine": max, "accuracy": max, "accuracy_top1": max}
JOB_LINE = ("latency_ms", "energy_mj", "throughput_fps", "output_cosine")  # per-job line
POINT_FILE = "point.json"  # a sweep job's status (ok / infeasible / error) and reason


def _status(job: Path) -> dict[str, str]:
    point = job / POINT_FILE
    if point.is_file():
        return json.loads(point.read_text())
    ok = (job / "metrics.json").is_file()  # a job run without point.json (older runs)
    return {"status": "ok" if ok else "error", "reason": "" if ok else "no metrics.json"}


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    rows = []
    jobs = (p for p in sweep_dir.iterdir()
            if (p / "metrics.json").is_file() or (p / POINT_FILE).is_file())
    for job in sorted(jobs, key=lambda p: (len(p.name), p.name)):
        status = _status(job)
        ok = status["status"] == "ok"
        metrics = json.loads((job / "metrics.json").read_text()) if ok else {}
        overrides_file = job / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.exists() else []
        cache_file = job / "cache.json"
        row = {"job": job.name, "overrides": " ".join(overrides or []), **status,
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


def _axes(rows: list[dict[str, Any]]) -> tuple[tuple[str, str], tuple[str, str]]:
    """The two costs the front minimises, with their axis labels: latency and energy, or,
    for language models, the time per generated token and the memory they take."""
    if any(r.get("memory_mb") is not None for r in rows):
        return ("latency_ms", "memory_mb"), ("ms per generated token", "memory (MB)")
    return ("latency_ms", "energy_mj"), ("latency (ms)", "energy per inference (mJ)")


def _accuracy(row: dict[str, Any]) -> float | None:
    """The eval objective (``accuracy``), else top-1, else a language model's perplexity
    change on the trained proxy (negated: higher is better), else the output cosine."""
    if row.get("perplexity_change_pct") is not None:
        return -row["perplexity_change_pct"]
    value = row.get("accuracy")
    value = value if value is not None else row.get("accuracy_top1")
    return value if value is not None else row.get("output_cosine")


PROXY_RESOLUTION = 1e-3  # output cosines closer than this are the same accuracy


def _ranked_accuracy(row: dict[str, Any]) -> float:
    """The accuracy the front compares. Without labels it is the output cosine, a proxy:
    cosines are compared to 3 decimals, so an fp16 point at 1.0000 is not "more accurate"
    than an int8 one at 0.9996 and its 5x latency keeps it off the front."""
    value = _accuracy(row) or 0.0
    if row.get("accuracy") is None and row.get("accuracy_top1") is None and \
            row.get("perplexity_change_pct") is None:
        return round(value / PROXY_RESOLUTION) * PROXY_RESOLUTION
    return value


def pareto(rows: list[dict[str, Any]]) -> list[bool]:
    """Non-dominated points: minimise latency and energy, maximise accuracy (when known;
    a proxy compared at its resolution). A point that did not run is on no front."""
    (x, y), _ = _axes(rows)
    pts = [(r.get(x), r.get(y), -_ranked_accuracy(r)) for r in rows]

    def dominates(p: tuple, q: tuple) -> bool:
        return all(a <= b for a, b in zip(p, q, strict=True)) and p != q

    return [None not in p and not any(None not in q and dominates(q, p) for q in pts)
            for p in pts]


def write_summary(sweep_dir: Path, rows: list[dict[str, Any]]
                  ) -> tuple[dict[str, dict], Figure]:
    """summary.csv and summary.md; returns the best point per objective and the function
    that draws pareto.png."""
    flags = pareto(rows)
    fields = ["job", "overrides", "status", *COLUMNS, "pareto", "reason"]
    write_csv(sweep_dir / "summary.csv",
              [{**row, "pareto": flag} for row, flag in zip(rows, flags, strict=True)], fields)
    llm = _axes(rows)[0][1] == "memory_mb"
    shown = ("ttft_ms", "decode_tokens_per_s", "memory_mb", "perplexity_change_pct") if llm \
        else ("latency_ms", "energy_mj", "throughput_fps", None)
    header = "TTFT ms | tokens/s | memory MB | perplexity change %" if llm else \
        "latency ms | energy mJ | fps | accuracy"
    lines = [f"| job | overrides | {header} | pareto |", "|---|---|---|---|---|---|---|"]
    for row, flag in zip(rows, flags, strict=True):
        if row["status"] != "ok":
            lines.append(f"| {row['job']} | {row['overrides']} | {row['status']}: "
                         f"{row['reason'].replace('|', '/')} | | | | |")
            continue
        cells = " | ".join(_f(row.get(k) if k else _accuracy(row)) for k in shown)
        lines.append(f"| {row['job']} | {row['overrides']} | {cells} | "
                     f"{'*' if flag else 'dominated'} |")
    write_text(sweep_dir / "summary.md", "\n".join(lines) + "\n")
    best = {}
    for metric, pick in OBJECTIVES.items():
        valid = [r for r in rows if r.get(metric) is not None]
        if valid:
            winner = pick(valid, key=lambda r, m=metric: r[m])
            best[metric] = {"job": winner["job"], "value": winner[metric],
                            "overrides": winner["overrides"]}
    return best, partial(_plot, rows, flags, sweep_dir / "pareto.png")


def _f(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}"


def _spans_a_decade(pts: list[tuple]) -> bool:
    """Log axes when either axis spans 10x or more: a sweep over hardware or models puts
    its Pareto points near the origin of a linear plot, one decade from the slowest."""
    return any(max(p[i] for p in pts) >= 10 * min(p[i] for p in pts) for i in (0, 1))


def _accuracy_name(rows: list[dict[str, Any]]) -> str:
    """Which figure ``_accuracy`` took (the same for every row of one sweep)."""
    for key, name in (("perplexity_change_pct", "-perplexity change % (npuflow's trained "
                                                "proxy decoder)"),
                      ("accuracy", "the eval objective"), ("accuracy_top1", "top-1"),
                      ("output_cosine", "output cosine vs fp32 (no labels: a proxy)")):
        if any(r.get(key) is not None for r in rows):
            return name
    return "none"


def _plot(rows: list[dict[str, Any]], flags: list[bool], path: Path) -> None:
    """Latency against energy, coloured by accuracy (no colour bar when every point has the
    same), the Pareto front ringed and labelled with its jobs, the legend outside the
    data."""
    plt = pyplot()
    (x, y), (x_label, y_label) = _axes(rows)
    pts = [(r[x], r[y], _accuracy(r), f, r.get("job", ""))
           for r, f in zip(rows, flags, strict=True)
           if r.get(x) is not None and r.get(y) is not None]
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    accuracy = _accuracy_name(rows)
    if pts:
        colour = [p[2] if p[2] is not None else 0.0 for p in pts]
        varies = max(colour) - min(colour) > 1e-9
        sc = ax.scatter([p[0] for p in pts], [p[1] for p in pts],
                        c=colour if varies else "#1f77b4", cmap="viridis" if varies else None,
                        s=40, label="points")
        if varies:
            fig.colorbar(sc, ax=ax, label=f"accuracy: {accuracy}")
        front = [p for p in pts if p[3]]
        ax.scatter([p[0] for p in front], [p[1] for p in front], s=220, facecolors="none",
                   edgecolors="#d62728", linewidths=1.5,
                   label=f"Pareto-optimal ({x_label}, {y_label}"
                   + (", accuracy)" if varies else ")"))
        for p in front:
            ax.annotate(f"#{p[4]}", (p[0], p[1]), xytext=(6, 6), textcoords="offset points",
                        fontsize=8, color="#d62728")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
        positive = all(p[0] > 0 for p in pts) and all(p[1] > 0 for p in pts)
        if positive and _spans_a_decade(pts):  # linear axes buried the small points
            ax.set_xscale("log")
            ax.set_yscale("log")
    same = pts and max(p[2] or 0.0 for p in pts) - min(p[2] or 0.0 for p in pts) <= 1e-9
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(f"sweep: {len(rows)} points; accuracy: {accuracy}"
                 + (f"\n{pts[0][2] or 0.0:.4g} at every point" if same else ""), fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


PLOTTED = ("latency_ms", "energy_mj")  # the picks whose simulate plots the summary draws


def picked_figures(sweep_dir: Path, best: dict[str, dict]) -> list[Figure]:
    """The simulate plots of the fastest and the most frugal job (skipped while the sweep
    ran; ``python -m pipeline.simulator.plots JOB_DIR`` draws any other)."""
    figures: list[Figure] = []
    for job in sorted({best[m]["job"] for m in PLOTTED if m in best}):
        run = sweep_dir / job
        if not (run / "simulate" / "timeline.png").is_file():
            figures += run_figures(run)
    return figures


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = collect(sweep_dir) if sweep_dir.is_dir() else []
        if not rows:
            return
        best, pareto_figure = write_summary(sweep_dir, rows)
        draw_all([pareto_figure, *picked_figures(sweep_dir, best)])
        for job in {b["job"] for b in best.values()}:  # their pages now have the plots
            if (sweep_dir / job / "metrics.json").is_file():
                write_run_report(sweep_dir / job)
        write_sweep_report(sweep_dir)
        failed = Counter(r["status"] for r in rows if r["status"] != "ok")
        table = Table(title=f"sweep summary: {sweep_dir} ({len(rows)} jobs"
                      + "".join(f", {n} {s}" for s, n in sorted(failed.items())) + ")")
        for col in ("objective", "best", "job", "overrides"):
            table.add_column(col)
        for metric, b in best.items():
            table.add_row(metric, _f(b["value"]), b["job"], b["overrides"])
        if best:
            Console().print(table)
        else:
            print(f"npuflow: error: no point of the sweep ran (see {sweep_dir / 'summary.md'})",
                  file=sys.stderr)
            sys.exit(1)
