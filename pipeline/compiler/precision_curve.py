"""Latency and energy of each point of automatic mixed precision's curve on this hardware.

The quantize stage knows accuracy but not the chip (its cache entry serves every hardware
of a sweep); the compile stage knows the chip. Each accepted point is re-quantized from
the quantize stage's range cache with that point's float nodes, compiled by the same
``compile_graph`` and timed by the same single-frame schedule as the run itself, so a
point's latency is exactly what a run with ``quant.keep_float=<its nodes>`` would print.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from omegaconf import DictConfig

from hardware.profile import HardwareProfile
from ops.load import from_onnx
from pipeline.compiler.driver import compile_graph
from pipeline.compiler.plan import Plan
from pipeline.quantization import schemes
from pipeline.simulator.metrics import latency_metrics
from pipeline.simulator.replay import FrameCosts, build
from pipeline.simulator.timeline import schedule


def frame_cost(plan: Plan, profile: HardwareProfile) -> dict:
    single = build(plan, profile, 1, 1, FrameCosts(0, 0))
    return latency_metrics(plan, single, schedule(single), profile)


def cost_points(curve: list[dict], float_model: Path, calibration: Path, quant: DictConfig,
                compile_cfg: DictConfig, profile: HardwareProfile) -> list[dict]:
    """The accepted points of ``curve`` with ``latency_ms`` and ``energy_mj`` added."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "point.onnx"
        for point in (p for p in curve if p["kept"]):
            schemes.quantize_int(float_model, path, calibration, quant, point["float_nodes"])
            plan = compile_graph(from_onnx(onnx.load(path)), profile, compile_cfg,
                                 quant.scheme, quant.float_precision)
            cost = frame_cost(Plan.from_json(plan), profile)
            out.append({**point, "latency_ms": cost["latency_ms"],
                        "energy_mj": cost["energy_mj"]})
    return out


def plot(points: list[dict], objective: str, float_value: float | None, path: Path) -> None:
    """Accuracy against latency, one marker per accepted point, labelled with its count of
    float layers: the trade the search offers on this chip."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipeline.artifacts import save_figure

    fig, ax = plt.subplots(figsize=(6.5, 4))
    xs, ys = [p["latency_ms"] for p in points], [p[objective] for p in points]
    ax.plot(xs, ys, marker="o")
    for p, x, y in zip(points, xs, ys, strict=True):
        ax.annotate(str(p["float_layers"]), (x, y), textcoords="offset points", xytext=(4, 4))
    if float_value is not None:
        ax.axhline(float_value, color="grey", linestyle="--", label="fp32")
        ax.legend()
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel(objective)
    ax.set_title("mixed precision: accuracy vs latency (labels: float layers)")
    fig.tight_layout()
    save_figure(fig, path)
