"""The calibration report: measured vs predicted per row (before, after, leave-one-out),
the fitted parameters, and a plot of the ratios."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hardware.profile import FreeParameter
from pipeline.artifacts import pyplot
from pipeline.calibrate.evaluate import Params


@dataclass(frozen=True)
class Outcome:
    labels: list[str]
    measured: list[float]
    before: list[float]  # the prior profile's predictions
    after: list[float]  # the fit on every row
    loo: list[float] | None  # each row by a fit that did not see it; None: too few rows
    prior: Params
    fitted: Params
    free: Sequence[FreeParameter]
    rms_log_error: float
    evaluations: int
    layers: list[dict] = field(default_factory=list)  # per-layer fit, rows that had layers


def ratios(predicted: Sequence[float], measured: Sequence[float]) -> list[float]:
    return [p / m for p, m in zip(predicted, measured, strict=True)]


def median_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Median of |ln(predicted / measured)|, as a factor (1.10 = 10% off either way)."""
    return math.exp(statistics.median(abs(math.log(r)) for r in ratios(predicted, measured)))


def worst(predicted: Sequence[float], measured: Sequence[float]) -> float:
    return math.exp(max(abs(math.log(r)) for r in ratios(predicted, measured)))


def summary(o: Outcome) -> str:
    if o.loo is None:
        distinct = len(set(o.labels))
        return (f"median error {median_error(o.before, o.measured):.3f}x before, "
                f"{median_error(o.after, o.measured):.3f}x fitted on all rows; worst "
                f"{worst(o.before, o.measured):.2f}x before; no leave-one-out figure: "
                f"{distinct} distinct configuration(s) for {len(o.free)} free parameter(s) "
                "leave nothing to check a fit against")
    return (f"median error {median_error(o.before, o.measured):.3f}x before, "
            f"{median_error(o.loo, o.measured):.3f}x leave-one-out after "
            f"({median_error(o.after, o.measured):.3f}x fitted on all rows); worst "
            f"{worst(o.before, o.measured):.2f}x before, {worst(o.loo, o.measured):.2f}x "
            "leave-one-out")


def markdown(o: Outcome, title: str) -> str:
    prior, fitted = dict(o.prior), dict(o.fitted)
    lines = [f"# {title}", "", summary(o) + ".", "",
             "| parameter | prior | prior spread | fitted | bounds |", "|---|---|---|---|---|"]
    lines += [f"| `{f.key}` | {prior[f.key]:.6g} | "
              f"{f'x{f.spread:g}' if f.spread else 'flat'} | {fitted[f.key]:.6g} | "
              f"[{f.low:g}, {f.high:g}] |" for f in o.free]
    lines += ["", f"Fit: scipy least squares on ln(latency), {o.evaluations} evaluations, "
              f"rms ln error {o.rms_log_error:.4f}.", "",
              "| row | measured ms | before | ratio | fitted | ratio | leave-one-out | ratio |",
              "|---|---|---|---|---|---|---|---|"]
    for i, label in enumerate(o.labels):
        m = o.measured[i]
        cells = [f"{p[i]:.3f} | {p[i] / m:.2f}" if p is not None else "- | -"
                 for p in (o.before, o.after, o.loo)]
        lines.append(f"| {label} | {m:.3f} | " + " | ".join(cells) + " |")
    if o.layers:
        lines += ["", "Per-layer times (the layers file): rms of ln(predicted / measured) over "
                  "each row's measured kernels (0.10 = ~10% per kernel).", "",
                  "| row | kernels fitted | layers not in npuflow's graph | rms before | "
                  "rms after |", "|---|---|---|---|---|"]
        for r in o.layers:
            left = f"{r['unmatched_count']}" + (f" (e.g. {', '.join(r['unmatched'])})"
                                                 if r["unmatched"] else "")
            lines.append(f"| {r['row']} | {r['kernels']} | {left} | {r['rms_before']:.3f} | "
                         f"{r['rms_after']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(o: Outcome, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(o.labels) + 2), 4))
    x = range(len(o.labels))
    width = 0.27
    for k, (name, pred) in enumerate((("before", o.before), ("fitted", o.after),
                                      ("leave-one-out", o.loo))):
        if pred is None:
            continue
        ax.bar([i + (k - 1) * width for i in x], ratios(pred, o.measured), width, label=name)
    ax.axhline(1.0, color="black", lw=0.8)
    for bound in (1 / 1.25, 1.25):
        ax.axhline(bound, color="grey", lw=0.6, ls="--")
    ax.set_xticks(list(x), o.labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("predicted / measured")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)
