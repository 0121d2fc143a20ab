"""A resource-constrained list scheduler: the timeline simulator's engine.

Each task needs one resource (NPU array, NPU vector unit, CPU, link, ...) for a duration
and may start only when its dependencies have finished and its resource is idle. Tasks are
placed in the given (topological) order at the earliest idle gap of their resource, so
independent tasks on different resources overlap, tasks on one resource never do, and the
next frame's CPU work can fill the CPU's idle time while the NPU runs this frame. The
makespan is the latency; walking back the dependency or resource edge that set each start
gives the critical path.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class Task:
    name: str
    resource: str
    duration: int
    deps: list[int] = field(default_factory=list)  # indices of earlier tasks
    category: str = ""  # what the time is spent on (npu, cpu_fallback, transfer, ...)
    start: int = 0
    end: int = 0
    waited_on: int | None = None  # the task whose end set this start (critical path)


def _earliest_gap(busy: list[tuple[int, int, int]], ends: list[int], ready: int,
                  duration: int) -> tuple[int, int | None]:
    """Earliest start >= ready where the resource is idle for ``duration``, and the task
    whose end it waits for (None if it waits for nothing on this resource). ``busy`` holds
    the resource's (start, end, task) in order; its intervals never overlap, so ``ends``
    (their ends, in the same order) is sorted too and the search starts at the first
    interval still busy at ``ready`` (a throughput run's thousands of tasks on one lane
    made the scan from the first interval quadratic)."""
    start, why = ready, None
    for j in range(bisect.bisect_right(ends, ready), len(busy)):
        lo, hi, idx = busy[j]
        if hi <= start:
            continue
        if lo >= start + duration:
            break
        start, why = hi, idx
    return start, why


def schedule(tasks: list[Task]) -> int:
    """Assign start/end in place; returns the makespan. A task starts at the earliest time
    its inputs are ready and its resource has an idle gap long enough (dataflow dispatch:
    a later-issued task may fill an earlier gap, e.g. the next frame's pre-processing)."""
    lanes: dict[str, tuple[list[tuple[int, int, int]], list[int]]] = {}
    for i, task in enumerate(tasks):
        ready, why = 0, None
        for d in task.deps:
            if d >= i:
                raise ValueError(f"task {task.name!r} depends on a later task ({d})")
            if tasks[d].end > ready:
                ready, why = tasks[d].end, d
        busy, ends = lanes.setdefault(task.resource, ([], []))
        start, blocker = _earliest_gap(busy, ends, ready, task.duration)
        task.start, task.end = start, start + task.duration
        task.waited_on = blocker if start > ready else why
        if task.duration:
            at = bisect.bisect_left(busy, (task.start, task.end, i))
            busy.insert(at, (task.start, task.end, i))
            ends.insert(at, task.end)
    return max((t.end for t in tasks), default=0)


def critical_path(tasks: list[Task]) -> list[int]:
    """Indices of the tasks on the critical path, first to last."""
    if not tasks:
        return []
    i: int | None = max(range(len(tasks)), key=lambda j: (tasks[j].end, -j))
    path = []
    while i is not None:
        path.append(i)
        i = tasks[i].waited_on
    return path[::-1]


def longest_path(durations: list[int], deps: list[list[int]]) -> int:
    """Length of the longest dependency chain (no resource limits): a lower bound."""
    finish: list[int] = []
    for dur, ds in zip(durations, deps, strict=True):
        finish.append(dur + max((finish[d] for d in ds), default=0))
    return max(finish, default=0)
