"""Vector-unit time: elementwise, activation, pooling and normalization work.

A vector unit of L lanes retires L element operations per cycle (the op specs in ``ops``
count the operations per element), so cycles = ceil(ops / L). This is the throughput
model Vela and NVDLA's SDP/PDP documentation use for their elementwise engines; it
ignores pipeline start-up, which the per-kernel dispatch cost covers.
"""

from __future__ import annotations

import math


def vector_cycles(ops: int, lanes: int) -> int:
    if lanes <= 0:
        raise ValueError("vector_unit.lanes must be > 0")
    return math.ceil(ops / lanes)


def copy_cycles(nbytes: int, bytes_per_cycle: float) -> int:
    """An on-chip copy (transpose, concat, pad) reads and writes every byte once."""
    return math.ceil(2 * nbytes / bytes_per_cycle)
