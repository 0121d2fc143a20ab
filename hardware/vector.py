"""Vector-unit time: elementwise, activation, pooling and normalization work.

A vector unit of L lanes retires L element operations per cycle (the op specs in ``ops``
count the operations per element), so cycles = ceil(ops / L). This is the throughput
model Vela and NVDLA's SDP/PDP documentation use for their elementwise engines; it
ignores pipeline start-up, which the per-kernel dispatch cost covers.
"""

from __future__ import annotations

import math

from hardware.profile_schema import VectorUnit


def vector_cycles(ops: int, output_bytes: int, unit: VectorUnit) -> int:
    """ceil(ops / lanes), and at least ceil(output bytes / output_bytes_per_cycle) where
    the profile caps what a pass retires per cycle (``vector_unit.output_bytes_per_cycle``;
    the caller counts a 16-bit element as one byte where ``vector_unit.output_counts`` is
    element: NVDLA's SDP is specified in elements per cycle, whatever the op)."""
    if unit.lanes <= 0:
        raise ValueError("vector_unit.lanes must be > 0")
    cycles = math.ceil(ops / unit.lanes)
    if unit.output_bytes_per_cycle > 0:
        cycles = max(cycles, math.ceil(output_bytes / unit.output_bytes_per_cycle))
    return cycles


def copy_cycles(nbytes: int, bytes_per_cycle: float) -> int:
    """An on-chip copy (transpose, concat, pad) reads and writes every byte once."""
    return math.ceil(2 * nbytes / bytes_per_cycle)
