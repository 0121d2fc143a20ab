"""Replay an execution plan on the profile's resources as timeline tasks.

Lanes: ``npu.array`` and ``npu.vector`` (a kernel runs on the unit its cost says, so an
array kernel and a vector kernel of independent branches overlap), ``cpu`` (fallback
kernels, layout conversions, pre/post-processing) and ``link`` (NPU <-> CPU transfers).
Kernel durations are the plan's (the cost model's, dispatch included); transfer and
conversion durations are recomputed from the profile, so a plan plus a profile is all
simulate needs. Frames: frame f's pre-processing may start once frame f - depth has left
post-processing (a queue of ``pipeline_depth`` frames between the CPU producer and the NPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hardware.host import layout_conversion_seconds, link_seconds
from hardware.profile import HardwareProfile
from hardware.units import lane_of
from pipeline.compiler.plan import Kernel, Plan, Transfer
from pipeline.simulator.timeline import Task

KERNEL_CATEGORY = {"npu": "npu", "cpu": "cpu_fallback"}


@dataclass(frozen=True)
class FrameCosts:
    preprocess_cycles: int
    postprocess_cycles: int


def _cycles(seconds: float, profile: HardwareProfile) -> int:
    return math.ceil(seconds * profile.frequency_mhz * 1e6)


def _lane(kernel: Kernel) -> str:
    """Where the kernel's time is drawn: its execution unit's lane (``hardware.units``)."""
    return "cpu" if kernel.target == "cpu" else lane_of(kernel.cost.unit)


def frame_tasks(plan: Plan, profile: HardwareProfile, frame: int, offset: int,
                entry_deps: list[int]) -> tuple[list[Task], list[int]]:
    """Tasks of one inference; indices are global (``offset`` = tasks already issued).
    Returns the tasks and the indices of its last tasks (graph outputs delivered)."""
    tasks: list[Task] = []
    kernel_task: dict[int, int] = {}
    ready: dict[tuple[str, str], int] = {}  # (tensor, side) -> task index that delivers it
    tag = f"f{frame}:" if frame else ""

    def add(task: Task) -> int:
        tasks.append(task)
        return offset + len(tasks) - 1

    def hand_over(t: Transfer, after: list[int]) -> int:
        link = _cycles(link_seconds(t.bytes, profile.link), profile)
        conv = _cycles(layout_conversion_seconds(t.bytes, profile.host.bandwidth_gbps),
                       profile) if t.layout_conversion else 0
        to_npu = t.direction.endswith("npu")
        steps = [("convert", "cpu", conv), ("link", "link", link)] if to_npu else \
            [("link", "link", link), ("convert", "cpu", conv)]
        # the graph's own inputs and outputs cross to and from the application on every
        # inference, fallback or not: their own category, not CPU fallback
        graph_io = t.source is None or t.to is None
        last = after
        for what, lane, dur in steps:
            if dur:
                category = "graph_io" if graph_io else (
                    "layout_conversion" if what == "convert" else "transfer")
                last = [add(Task(f"{tag}{what}:{t.tensor}", lane, dur, list(last),
                                 category))]
        return last[0] if last else (after[0] if after else -1)

    transfers = plan.transfers
    for t in (t for t in transfers if t.source is None):
        ready[(t.tensor, "npu")] = hand_over(t, entry_deps)
    for k in plan.kernels:
        deps = list(entry_deps)
        for tensor in k.inputs:
            side_key = (tensor, k.target)
            if side_key in ready and ready[side_key] >= 0:
                deps.append(ready[side_key])
        for d in k.deps:
            deps.append(kernel_task[d])
        idx = add(Task(f"{tag}{k.name}", _lane(k), int(k.cost.total_cycles),
                       sorted(set(deps)), KERNEL_CATEGORY[k.target]))
        kernel_task[k.id] = idx
        for tensor in k.outputs:
            ready[(tensor, k.target)] = idx
        for t in (t for t in transfers if t.source == k.id):
            side = "cpu" if t.to is None else t.direction.split("->")[1]
            ready[(t.tensor, side)] = hand_over(t, [idx])
        # a consumer on the other side waits for the hand-over, not the kernel
    exits = [ready[(t, "cpu")] for t in plan.outputs if (t, "cpu") in ready]
    if not exits:
        exits = [offset + len(tasks) - 1] if tasks else entry_deps
    return tasks, exits


def build(plan: Plan, profile: HardwareProfile, frames: int, depth: int,
          costs: FrameCosts) -> list[Task]:
    """All tasks of ``frames`` frames, each with pre- and post-processing on the CPU."""
    tasks: list[Task] = []
    post_of: list[int] = []
    for f in range(frames):
        gate = [post_of[f - depth]] if f - depth >= 0 else []
        entry = gate
        if costs.preprocess_cycles:
            tasks.append(Task(f"f{f}:preprocess", "cpu", costs.preprocess_cycles, gate,
                              "preprocess"))
            entry = [len(tasks) - 1]
        frame, exits = frame_tasks(plan, profile, f, len(tasks), entry)
        tasks += frame
        tasks.append(Task(f"f{f}:postprocess", "cpu", costs.postprocess_cycles,
                          sorted(set(exits)), "postprocess"))
        post_of.append(len(tasks) - 1)
    return tasks


def dma_lane(plan: Plan, tasks: list[Task], double_buffering: bool) -> list[Task]:
    """The DMA engine's busy time inside each NPU kernel, for the timeline: concurrent with
    compute when double-buffered, ahead of it otherwise (the kernel's duration already
    accounts for it, so these bars are shown, not scheduled)."""
    by_name = {t.name: t for t in tasks}
    out = []
    for k in plan.kernels:
        t, mem = by_name.get(k.name), k.cost.memory_cycles
        if t is None or k.target != "npu" or not mem:
            continue
        start = t.start + (k.cost.overhead_cycles if double_buffering else 0)
        out.append(Task(f"dma:{k.name}", "npu.dma", mem, category="dma", start=start,
                        end=start + mem))
    return out
