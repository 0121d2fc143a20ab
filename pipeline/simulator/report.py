"""Simulate's artifacts: layers.csv, the stage breakdown, and three PNG plots.

Plots are written with matplotlib's Agg backend and no timestamp metadata, so the same
plan gives the same bytes. Every figure is derived from the plan and the timeline.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from hardware.cost import bytes_per_cycle
from hardware.profile import HardwareProfile
from hardware.timeline import Task
from pipeline.artifacts import save_figure, write_csv

LAYER_COLUMNS = ("kernel", "ops", "target", "precision", "macs", "compute_cycles",
                 "memory_cycles", "overhead_cycles", "total_cycles", "bound", "dram_bytes",
                 "energy_uj", "start_cycle", "end_cycle", "unit", "tiling", "cores")
COLOURS = {"npu": "#2b7bba", "cpu_fallback": "#d62728", "transfer": "#ff9f1c",
           "layout_conversion": "#9467bd", "preprocess": "#7f7f7f", "postprocess": "#bcbd22",
           "dma": "#17becf"}


def layer_rows(plan: dict[str, Any], tasks: list[Task]) -> list[dict[str, Any]]:
    by_name = {t.name: t for t in tasks}
    rows = []
    for k in plan["kernels"]:
        c, t = k["cost"], by_name.get(k["name"])
        tiling = k["tiling"]
        rows.append({
            "kernel": k["name"], "ops": "+".join(k["op_types"]), "target": k["target"],
            "precision": k["precision"], "macs": k["macs"],
            "compute_cycles": c["compute_cycles"], "memory_cycles": c["memory_cycles"],
            "overhead_cycles": c["overhead_cycles"], "total_cycles": c["total_cycles"],
            "bound": c["bound"], "dram_bytes": c["dram_bytes"],
            "energy_uj": round(c["energy_pj"] * 1e-6, 6),
            "start_cycle": t.start if t else "", "end_cycle": t.end if t else "",
            "unit": c["unit"], "cores": k["cores"],
            "tiling": "" if not tiling else
            f"{tiling['tm']}x{tiling['tn']}x{tiling['tk']}:{tiling['order']}",
        })
    return rows


def write_layers_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    write_csv(path, rows, LAYER_COLUMNS)


def read_layers_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def plot_timeline(tasks: list[Task], path: Path, frequency_mhz: float, title: str) -> None:
    lanes = sorted({t.resource for t in tasks})
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.6 * len(lanes)))
    scale = 1 / (frequency_mhz * 1e3)  # cycles -> ms
    for t in tasks:
        if t.duration:
            ax.barh(lanes.index(t.resource), t.duration * scale, left=t.start * scale,
                    color=COLOURS.get(t.category, "#333333"), edgecolor="white",
                    linewidth=0.3, height=0.7)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlabel("time (ms)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), loc="upper center", ncol=7, fontsize=7,
              bbox_to_anchor=(0.5, -0.35 if len(lanes) < 4 else -0.2))
    fig.tight_layout()
    save_figure(fig, path)


def plot_roofline(plan: dict[str, Any], profile: HardwareProfile, path: Path) -> None:
    """Each NPU array kernel at (MACs per DRAM byte, achieved MACs per cycle) under the
    profile's roofs: peak MACs/cycle and DRAM bytes/cycle x intensity."""
    peak = max(profile.peak_macs_per_cycle.values())
    bw = bytes_per_cycle(profile)
    pts = [(k["macs"] / max(k["cost"]["dram_bytes"], 1), k["macs"] / k["cost"]["total_cycles"],
            k["cost"]["bound"]) for k in plan["kernels"]
           if k["target"] == "npu" and k["macs"] and k["cost"]["total_cycles"]]
    fig, ax = plt.subplots(figsize=(7, 5))
    lo = min([p[0] for p in pts] + [0.1]) / 2
    hi = max([p[0] for p in pts] + [peak / bw * 4]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="black", label="roofline")
    for bound, colour in (("compute", "#2b7bba"), ("memory", "#d62728"),
                          ("overhead", "#ff9f1c")):
        sel = [p for p in pts if p[2] == bound]
        if sel:
            ax.scatter([p[0] for p in sel], [p[1] for p in sel], s=14, color=colour,
                       label=f"{bound}-bound kernels")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte)")
    ax.set_ylabel("achieved MACs per cycle")
    ax.set_title(f"{plan['graph']} on {profile.name}: peak {peak:.0f} MACs/cycle, "
                 f"{bw:.1f} B/cycle")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def plot_layers(rows: list[dict[str, Any]], path: Path, top: int = 15) -> None:
    rows = sorted(rows, key=lambda r: -r["total_cycles"])[:top][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.5))
    names = [f"{r['kernel']} ({r['target']})" for r in rows]
    compute = [min(r["compute_cycles"], r["total_cycles"]) for r in rows]
    overhead = [r["overhead_cycles"] for r in rows]
    memory = [max(r["total_cycles"] - c - o, 0) for r, c, o in zip(rows, compute, overhead,
                                                                 strict=True)]
    ax.barh(names, compute, color="#2b7bba", label="compute")
    ax.barh(names, memory, left=compute, color="#d62728", label="memory beyond compute")
    ax.barh(names, overhead, left=[c + m for c, m in zip(compute, memory, strict=True)],
            color="#ff9f1c", label="dispatch / overhead")
    ax.set_xlabel("cycles")
    ax.set_title(f"top {len(rows)} kernels by time")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)


def breakdown_markdown(parts: dict[str, float]) -> str:
    total = sum(parts.values()) or 1.0
    lines = ["| stage | ms | share |", "|---|---|---|"]
    for name, ms in parts.items():
        lines.append(f"| {name} | {ms:.3f} | {100 * ms / total:.1f}% |")
    return "\n".join(lines) + "\n"
