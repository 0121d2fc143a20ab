"""The quantize stage's figures: per-layer error and the automatic precision search.

Functions of plain values in a module of light imports, so that a figure pickles to the
run's figure server (``pipeline.reports.figure_server``) and is drawn there."""

from __future__ import annotations

from pathlib import Path

from pipeline.artifacts import pyplot, save_figure


def plot_layer_errors(rows: list[dict], path: Path, jump: str | None = None,
                      threshold: float | None = None) -> None:
    """Accumulated and isolated cosine per layer, the layers named on the axis (every
    k-th when there are more than fit), the threshold and the first layer under it
    marked: the layer to look at first."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 4.6))
    xs = range(len(rows))
    ax.plot(xs, [r["cosine"] if r["cosine"] is not None else float("nan") for r in rows],
            marker=".", label="accumulated (whole model; gaps: layers kept float)")
    iso = [(i, r["isolated_cosine"]) for i, r in enumerate(rows)
           if r["isolated_cosine"] is not None]
    if iso:
        ax.scatter([i for i, _ in iso], [c for _, c in iso], color="#d62728", s=12,
                   label="isolated (layer alone)", zorder=3)
    if threshold is not None:
        ax.axhline(threshold, color="grey", linestyle=":", linewidth=1,
                   label=f"quant.analysis.jump_cosine {threshold:g}")
    names = [str(r.get("layer", i)) for i, r in enumerate(rows)]
    if jump in names:
        at = names.index(jump)
        ax.axvline(at, color="#ff7f0e", linewidth=1.2,
                   label=f"first layer under the threshold: {jump}")
    every = max(1, -(-len(rows) // 60))
    ticks = list(range(0, len(rows), every))
    ax.set_xticks(ticks)
    ax.set_xticklabels([names[i][:28] for i in ticks], rotation=90, fontsize=6)
    ax.set_xlabel("layer (graph order)" + (f", every {every}th named" if every > 1 else ""))
    ax.set_ylabel("cosine vs fp32")
    ax.set_title("per-layer quantization error")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def plot_auto_curve(curve: list[dict], key: str, float_score: float | None,
                    path: Path) -> None:
    """The automatic search's trials: ``key`` against the layers kept float, kept and
    rejected, with the fp32 score (labelled data) as a line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    kept = [p for p in curve if p["kept"]]
    tried = [p for p in curve if not p["kept"]]
    ax.plot([p["float_layers"] for p in kept], [p[key] for p in kept], marker="o",
            label="kept (improves)")
    ax.scatter([p["float_layers"] + 1 for p in tried], [p[key] for p in tried],
               marker="x", color="#d62728", label="tried, rejected", zorder=3)
    if float_score is not None:
        ax.axhline(float_score, color="grey", linestyle="--", label="fp32")
    ax.set_xlabel("layers kept float")
    ax.set_ylabel(key)
    ax.set_title("automatic mixed precision (latency per point: compile/auto_curve.json)")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
