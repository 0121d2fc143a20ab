"""Simulate's artifacts: layers.csv, the stage breakdown, and three PNG plots.

Plots are written with matplotlib's Agg backend and no timestamp metadata, so the same
plan gives the same bytes. Every figure is derived from the plan and the timeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hardware.cost import bytes_per_cycle, gemm_bytes_per_cycle
from hardware.profile import HardwareProfile
from pipeline.artifacts import pyplot, save_figure, write_csv
from pipeline.compiler.plan import Plan
from pipeline.simulator.timeline import Task

LAYER_COLUMNS = ("kernel", "ops", "target", "precision", "macs", "compute_cycles",
                 "memory_cycles", "overhead_cycles", "total_cycles", "bound", "dram_bytes",
                 "energy_uj", "start_cycle", "end_cycle", "unit", "tiling", "cores")
COLOURS = {"npu": "#2b7bba", "cpu_fallback": "#d62728", "transfer": "#ff9f1c",
           "layout_conversion": "#9467bd", "graph_io": "#8c564b", "preprocess": "#7f7f7f",
           "postprocess": "#bcbd22", "dma": "#17becf"}


def layer_rows(plan: Plan, tasks: list[Task]) -> list[dict[str, Any]]:
    by_name = {t.name: t for t in tasks}
    rows = []
    for k in plan.kernels:
        c, t = k.cost, by_name.get(k.name)
        tiling = k.tiling
        rows.append({
            "kernel": k.name, "ops": "+".join(k.op_types), "target": k.target,
            "precision": k.precision, "macs": k.macs,
            "compute_cycles": c.compute_cycles, "memory_cycles": c.memory_cycles,
            "overhead_cycles": c.overhead_cycles, "total_cycles": c.total_cycles,
            "bound": c.bound, "dram_bytes": c.dram_bytes,
            "energy_uj": round(c.energy_pj * 1e-6, 6),
            "start_cycle": t.start if t else "", "end_cycle": t.end if t else "",
            "unit": c.unit, "cores": k.cores,
            "tiling": "" if not tiling else
            f"{tiling.tm}x{tiling.tn}x{tiling.tk}:{tiling.order}",
        })
    return rows


def write_layers_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    write_csv(path, rows, LAYER_COLUMNS)


def plot_timeline(tasks: list[Task], path: Path, frequency_mhz: float, title: str) -> None:
    plt = pyplot()
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
    drawn = [c for c in COLOURS if any(t.category == c and t.duration for t in tasks)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[c]) for c in drawn]
    ax.legend(handles, drawn, loc="upper center", ncol=7, fontsize=7,  # what is drawn only
              bbox_to_anchor=(0.5, -0.35 if len(lanes) < 4 else -0.2))
    fig.tight_layout()
    save_figure(fig, path)


@dataclass(frozen=True)
class RooflinePoint:
    kernel: str
    unit: str  # array | vector: the roof the kernel is held to
    intensity: float  # MACs per DRAM byte
    achieved: float  # MACs per cycle
    label: str  # compute | memory (bandwidth) | memory (DMA latency) | overhead
    bandwidth: float  # DRAM bytes per cycle its traffic moves at (a weight stream's own)


def roofline_points(plan: Plan, profile: HardwareProfile
                    ) -> tuple[list[RooflinePoint], dict[str, float], float]:
    """NPU kernels with MACs, each under its own unit's roof: the MAC array's peak MACs
    per cycle, or the vector unit's lanes (a MAC is one lane-op there). A memory-bound
    kernel whose DRAM bytes / bandwidth alone would not bind it (intensity right of the
    ridge) is bound by the DMA's exposed latency per burst, and says so: the cost model's
    memory time is bytes / bandwidth plus that latency (hardware/cost.py). A
    matrix-vector product's roof is the profile's weight-stream rate
    (``dram.stream_gbps``), every other kernel's the tile rate returned."""
    roofs = {"array": float(max(profile.peak_macs_per_cycle.values())),
             "vector": float(profile.vector_unit.lanes)}
    bw = bytes_per_cycle(profile)
    points = []
    for k in plan.kernels:
        cost = k.cost
        if k.target != "npu" or not k.macs or not cost.total_cycles:
            continue
        unit = "vector" if cost.unit == "vector" else "array"
        own = gemm_bytes_per_cycle(k.gemm.m, profile) if k.gemm and unit == "array" else bw
        intensity = k.macs / max(cost.dram_bytes, 1)
        label = cost.bound
        if label == "memory":
            label = "memory (bandwidth)" if intensity < roofs[unit] / own else \
                "memory (DMA latency)"
        points.append(RooflinePoint(k.label, unit, intensity,
                                    k.macs / cost.total_cycles, label, own))
    return points, roofs, bw


def plot_roofline(plan: Plan, profile: HardwareProfile, path: Path) -> None:
    """Each NPU kernel at (MACs per DRAM byte, achieved MACs per cycle) under its unit's
    roofs: peak MACs (or vector lanes) per cycle and DRAM bytes/cycle x intensity."""
    plt = pyplot()
    pts, roofs, bw = roofline_points(plan, profile)
    fig, ax = plt.subplots(figsize=(7, 5))
    lo = min([p.intensity for p in pts] + [0.1]) / 2
    hi = max([p.intensity for p in pts] + [roofs["array"] / bw * 4]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    units = sorted({p.unit for p in pts}) or ["array"]
    for unit, style in (("array", "-"), ("vector", "--")):
        if unit in units:
            ax.plot(xs, [min(roofs[unit], x * bw) for x in xs], color="black",
                    linestyle=style, label=f"{unit} roof ({roofs[unit]:.0f} MACs/cycle)")
    for stream in sorted({p.bandwidth for p in pts} - {bw}):  # matrix-vector weight streams
        ax.plot(xs, [min(roofs["array"], x * stream) for x in xs], color="grey",
                linestyle=":", label=f"weight-stream roof ({stream:.1f} B/cycle)")
    colours = {"compute": "#2b7bba", "memory (bandwidth)": "#d62728",
               "memory (DMA latency)": "#9467bd", "overhead": "#ff9f1c"}
    for label, colour in colours.items():
        for unit, marker in (("array", "o"), ("vector", "^")):
            sel = [p for p in pts if p.label == label and p.unit == unit]
            if sel:
                ax.scatter([p.intensity for p in sel], [p.achieved for p in sel], s=14,
                           color=colour, marker=marker, label=f"{label}, {unit}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte)")
    ax.set_ylabel("achieved MACs per cycle")
    ax.set_title(f"{plan.graph} on {profile.name}: array {roofs['array']:.0f}, vector "
                 f"{roofs['vector']:.0f} MACs/cycle, {bw:.1f} B/cycle")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def short_label(name: str, width: int = 48) -> str:
    """A kernel name fit for an axis: exporters' names (TensorFlow's run to 100 characters
    of scopes) keep their head and their distinctive tail."""
    if len(name) <= width:
        return name
    keep = width - 3
    return f"{name[:keep // 3]}...{name[-(keep - keep // 3):]}"


def plot_layers(rows: list[dict[str, Any]], path: Path, top: int = 15) -> None:
    plt = pyplot()
    rows = sorted(rows, key=lambda r: -r["total_cycles"])[:top][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.5))
    names = [f"{short_label(r['kernel'])} ({r['target']})" for r in rows]
    compute = [min(r["compute_cycles"], r["total_cycles"]) for r in rows]
    overhead = [r["overhead_cycles"] for r in rows]
    memory = [max(r["total_cycles"] - c - o, 0) for r, c, o in zip(rows, compute, overhead,
                                                                 strict=True)]
    y = range(len(rows))  # positions, not names: two kernels may share a shortened label
    ax.barh(y, compute, color="#2b7bba", label="compute")
    ax.barh(y, memory, left=compute, color="#d62728", label="memory beyond compute")
    ax.barh(y, overhead, left=[c + m for c, m in zip(compute, memory, strict=True)],
            color="#ff9f1c", label="dispatch / overhead")
    ax.set_yticks(list(y), names)
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
