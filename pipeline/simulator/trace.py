"""simulate/trace.json: the timelines in the Chrome trace event format.

The format onnxruntime's profiler, PyTorch's profiler and TVM write, which Perfetto
(ui.perfetto.dev, "Open trace file") and chrome://tracing open. One process per run (the
single inference; the multi-frame throughput run), one thread per resource (MAC array,
vector unit, DMA, link, CPU), one complete ("X") slice per task, timestamps in
microseconds at the profile's clock. Each slice carries what the plan knows of it as args:
cycles, category, and for a kernel its ops, unit, precision, bound, DRAM bytes, MACs and
whether it is on the critical path; for a hand-over, its bytes and layout conversion.
With ``simulate.sustained.seconds`` > 0 the sustained run is a third process of counter
tracks (temperature, clock, latency, power per simulated second).
"""

from __future__ import annotations

from typing import Any

from pipeline.compiler.plan import Kernel, Plan
from pipeline.simulator.timeline import Task

# the runs every trace may hold, in their fixed processes; any other run a caller passes (a
# mixture of experts' parts, pipeline.llm.phases.TRACE_RUNS) takes the next free one
RUNS = {"single inference": 1, "throughput run": 2, "llm prefill block": 4,
        "llm first decode block": 5, "llm last decode block": 6, "llm lm_head chunk": 7}
SUSTAINED_PID = 3
COUNTERS = ("temperature_c", "frequency_mhz", "latency_ms", "power_w")


def _kernel_args(k: Kernel) -> dict[str, Any]:
    c = k.cost
    return {"kernel_id": k.id, "kernel": k.name, "target": k.target, "ops": k.op_types,
            "cores": k.cores, "unit": c.unit, "precision": k.precision, "bound": c.bound,
            "macs": k.macs, "dram_bytes": c.dram_bytes, "compute_cycles": c.compute_cycles,
            "memory_cycles": c.memory_cycles, "overhead_cycles": c.overhead_cycles}


def _args_by_name(plan: Plan) -> dict[str, dict[str, Any]]:
    """Slice name (as the replay names tasks, frame tag removed) -> its plan facts."""
    out = {k.name: _kernel_args(k) for k in plan.kernels}
    for k in plan.kernels:
        out[f"dma:{k.name}"] = {"kernel_id": k.id, "dram_bytes": k.cost.dram_bytes}
    for t in plan.transfers:
        facts = {"bytes": t.bytes, "direction": t.direction,
                 "layout_conversion": t.layout_conversion}
        out[f"link:{t.tensor}"] = facts
        out[f"convert:{t.tensor}"] = facts
    return out


def _untagged(name: str) -> str:
    head, _, rest = name.partition(":")
    return rest if head.startswith("f") and head[1:].isdigit() and rest else name


def _shown(name: str, labels: dict[str, str]) -> str:
    """A task's slice name with its kernel's label (``Gemm linear_1.tmp_0``) in place of
    the bare node name; the frame or ``dma:`` tag kept."""
    bare = _untagged(name)
    tag = name[:len(name) - len(bare)]
    if bare.startswith("dma:"):
        tag, bare = tag + "dma:", bare[4:]
    return tag + labels.get(bare, bare)


def _sustained(plan: Plan, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sustained run (simulate/sustained.csv, one row per second) as counter tracks."""
    events: list[dict[str, Any]] = [{
        "ph": "M", "name": "process_name", "pid": SUSTAINED_PID, "tid": 0,
        "args": {"name": f"{plan.graph} on {plan.profile}: sustained run"}}]
    for row in rows:
        for name in COUNTERS:
            events.append({"ph": "C", "name": name, "pid": SUSTAINED_PID, "tid": 0,
                           "ts": float(row["time_s"]) * 1e6, "args": {name: float(row[name])}})
    return events


def chrome_trace(plan: Plan, runs: dict[str, list[Task]], frequency_mhz: float,
                 critical: set[str] | None = None,
                 sustained: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    us_per_cycle = 1.0 / frequency_mhz
    facts = _args_by_name(plan)
    labels = {k.name: k.label for k in plan.kernels}
    events: list[dict[str, Any]] = []
    first_free = max(RUNS.values()) + 1
    extra = {run: first_free + i for i, run in enumerate(r for r in runs if r not in RUNS)}
    for run, pid in {**RUNS, **extra}.items():
        tasks = runs.get(run)
        if not tasks:
            continue
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"{plan.graph} on {plan.profile}: {run}"}})
        lanes = sorted({t.resource for t in tasks})
        for tid, lane in enumerate(lanes, start=1):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": lane}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
        for t in sorted(tasks, key=lambda t: (t.start, lanes.index(t.resource))):
            if not t.duration:
                continue
            args = {"cycles": t.duration, "category": t.category,
                    **facts.get(_untagged(t.name), {})}
            if critical is not None and pid == 1:
                args["critical"] = t.name in critical
            events.append({"ph": "X", "name": _shown(t.name, labels), "cat": t.category, "pid": pid,
                           "tid": lanes.index(t.resource) + 1, "ts": t.start * us_per_cycle,
                           "dur": t.duration * us_per_cycle, "args": args})
    if sustained:
        events += _sustained(plan, sustained)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"graph": plan.graph, "profile": plan.profile,
                          "frequency_mhz": frequency_mhz, "time_unit": "us"}}
