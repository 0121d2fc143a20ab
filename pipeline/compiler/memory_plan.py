"""Static memory planning: activation buffers by lifetime, in SRAM where they fit.

Written here because the planners that exist live inside runtimes (TFLite's arena planner,
TVM's storage rewrite) and cannot be called on npuflow's plan. The heuristic is TFLite's
"greedy by size" (Pisarchyk & Lee, "Efficient Memory Management for Deep Neural Net
Inference", 2020): take buffers largest first and give each the lowest offset that does
not overlap, in address, any already placed buffer whose lifetime overlaps its own. On a
chain it reaches the lower bound (the largest sum of simultaneously live buffers).

A buffer goes to SRAM when its producer and all its consumers run on the NPU and it fits
under the activation budget; otherwise it goes to DRAM (which is planned the same way,
without a limit). Tensors crossing to the CPU always live in DRAM.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Buffer:
    tensor: str
    size: int
    start: int  # index of the producing kernel (-1: a graph input)
    end: int  # index of the last consuming kernel
    memory: str = "dram"  # sram | dram
    offset: int = -1
    want_sram: bool = False

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.start <= other.end and other.start <= self.end


def _first_fit(buffer: Buffer, placed: list[Buffer], limit: int | None) -> int | None:
    """Lowest offset where ``buffer`` fits between the time-overlapping placed buffers."""
    busy = sorted((b.offset, b.offset + b.size) for b in placed
                  if b.overlaps_in_time(buffer))
    offset = 0
    for lo, hi in busy:
        if offset + buffer.size <= lo:
            break
        offset = max(offset, hi)
    if limit is not None and offset + buffer.size > limit:
        return None
    return offset


def plan(buffers: list[Buffer], sram_limit: int | None) -> list[Buffer]:
    """Assign memory and offsets in place (deterministic: ties broken by tensor name);
    ``sram_limit`` None: the SRAM holds the whole arena (``Sram.arena: sram``)."""
    order = sorted(buffers, key=lambda b: (-b.size, b.start, b.tensor))
    placed: dict[str, list[Buffer]] = {"sram": [], "dram": []}
    for b in order:
        offset = _first_fit(b, placed["sram"], sram_limit) if b.want_sram else None
        if offset is None:
            b.memory = "dram"
            offset = _first_fit(b, placed["dram"], None)
        else:
            b.memory = "sram"
        assert offset is not None
        b.offset = offset
        placed[b.memory].append(b)
    return buffers


def arena_peak(buffers: list[Buffer], memory: str) -> int:
    """High-water mark of the planned arena."""
    return max((b.offset + b.size for b in buffers if b.memory == memory), default=0)


def live_peak(buffers: list[Buffer], memory: str) -> int:
    """Lower bound for any planner: the most bytes live at one kernel."""
    chosen = [b for b in buffers if b.memory == memory]
    if not chosen:
        return 0
    steps = range(min(b.start for b in chosen), max(b.end for b in chosen) + 1)
    return max(sum(b.size for b in chosen if b.start <= t <= b.end) for t in steps)
