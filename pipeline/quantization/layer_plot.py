"""quantize's layer_error.png, in a module of its own: the run's figure server
(``pipeline.reports.figures``) imports what a figure's function lives in, and the quantize
stage's module would bring onnxruntime's quantizer with it."""

from __future__ import annotations

from pathlib import Path

from pipeline.artifacts import pyplot, save_figure


def plot_layer_error(rows: list[dict], path: Path, jump: str | None = None,
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
