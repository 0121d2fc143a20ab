"""DRAM <-> SRAM traffic of a tiled GEMM, SRAM capacity, and memory time.

Written here rather than taken from a library because the tools that model it (Timeloop,
ZigZag) need their own mapping DSL and minutes per layer; npuflow needs a closed form it
can evaluate thousands of times per compile. The model is the classic loop-nest analysis
(e.g. Yang et al., "Interstellar", ASPLOS 2020; the ZigZag/Timeloop reuse rules):

- The GEMM (M x K) @ (K x N) is cut into tiles (tm x tk), (tk x tn), (tm x tn) and the tile
  loops run in ``order`` (outer to inner, a permutation of "mnk").
- An operand's tile stays in SRAM while only loops that do not index it advance *inside*
  the innermost loop that does; every iteration of a non-indexing loop *outside* it
  re-fetches the operand. Traffic = compulsory bytes x product of those trip counts.
- The output, indexed by (m, n), is accumulated in SRAM while k runs inside it; each trip
  of k outside it spills the partial sums (write + read back at accumulator width).
- A tile transfer is one DMA burst. Only operands that move bytes issue bursts (an
  operand kept in SRAM costs no DRAM latency). With double buffering the DMA engine issues
  the next tile's request while the current one transfers, so the latency of a stream is
  exposed once (:func:`exposed_latencies`); with a single buffer every burst waits for its
  own latency before compute can use it.
- The DRAM port moves all of a kernel's streams at its bandwidth; where a DMA keeps each
  stream on a channel of its own with a bounded number of requests in flight
  (:class:`Channels`, ``hardware/units/dma_channels.py``), no stream moves faster than
  its channel either, and the slowest stream sets the time when it binds.

Halo re-reads of spatially tiled convolutions are ignored (at most (k - 1) / tile rows
extra); the compulsory input bytes are the real tensor, not its im2col expansion.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ops.work import GemmShape

ORDERS = ("mnk", "mkn", "nmk", "nkm", "kmn", "knm")
_INDEXES = {"a": "mk", "b": "kn", "c": "mn"}


@dataclass(frozen=True)
class Tiling:
    tm: int
    tn: int
    tk: int
    order: str = "mnk"  # tile loops, outer to inner

    def clipped(self, gemm: GemmShape) -> Tiling:
        """The same tiling with tiles no larger than the GEMM."""
        return Tiling(min(self.tm, gemm.m), min(self.tn, gemm.n), min(self.tk, gemm.k),
                      self.order)


@dataclass(frozen=True)
class OperandBytes:
    """Compulsory DRAM bytes of each operand (the tensor read or written once)."""

    a: int  # input activations
    b: int  # weights
    c: int  # outputs at output precision
    acc_width: int = 4  # bytes per partial sum (int32 / fp32 accumulators)
    c_elems: int = 0  # output elements (partial-sum spills are counted at acc_width)


@dataclass(frozen=True)
class Traffic:
    a: int
    b: int
    c: int
    bursts: int
    streams: int = 0  # operands that move DRAM bytes (each a pipelined burst stream)

    @property
    def total(self) -> int:
        return self.a + self.b + self.c


@dataclass(frozen=True)
class Channels:
    """Bytes per cycle each operand stream gets on its own DMA channel: the input read
    (``a``), the weight read (``b``) and the output write (``c``); ``fixed``: the cycles of
    one kernel's stream that no tiling changes (its per-output-channel scale and bias
    words, on a channel of their own, once per output block); ``sram_read`` /
    ``sram_write``: the rate of one read or write stream on the SRAM's own port (its
    requests in flight over its latency, as the DRAM's)."""

    a: float
    b: float
    c: float
    fixed: float = 0.0
    sram_read: float = float("inf")
    sram_write: float = float("inf")


def exposed_latencies(traffic: Traffic, double_buffering: bool) -> int:
    """DRAM latencies on the kernel's time: one per stream when the DMA prefetches
    (double buffering), one per burst when each burst is waited for."""
    return traffic.streams if double_buffering else traffic.bursts


def trip_counts(gemm: GemmShape, tiling: Tiling) -> dict[str, int]:
    t = tiling.clipped(gemm)
    return {"m": math.ceil(gemm.m / t.tm), "n": math.ceil(gemm.n / t.tn),
            "k": math.ceil(gemm.k / t.tk)}


def refetch_factor(order: str, operand: str, trips: dict[str, Any]) -> Any:
    """How many times an operand is streamed from DRAM under this loop order. Trip counts
    may be ints or numpy arrays (the tiler evaluates a whole grid of tilings at once)."""
    indexes = _INDEXES[operand]
    innermost = max(order.index(d) for d in indexes)
    factor: Any = 1
    for position, loop in enumerate(order):
        if loop not in indexes and position < innermost:
            factor *= trips[loop]
    return factor


def tiled_traffic(order: str, trips: dict[str, Any], sizes: OperandBytes, groups: int
                  ) -> Traffic:
    """DRAM bytes and bursts of a GEMM tiled with these trip counts under ``order``. Trip
    counts may be ints (one tiling) or numpy arrays (the tiler's whole grid at once): one
    formula for both, so the tiler ranks tilings by exactly what the cost model charges."""
    fa, fb, fc = (refetch_factor(order, x, trips) for x in "abc")
    spill = (fc - 1) * 2 * sizes.c_elems * sizes.acc_width
    a, b, c = sizes.a * fa, sizes.b * fb, sizes.c + spill
    c_moves = c > 0
    bursts = ((trips["m"] * trips["k"] * fa if sizes.a else 0)
              + (trips["k"] * trips["n"] * fb if sizes.b else 0)
              + trips["m"] * trips["n"] * (2 * fc - 1) * c_moves) * groups
    return Traffic(a=a, b=b, c=c, bursts=bursts,
                   streams=int(sizes.a > 0) + int(sizes.b > 0) + c_moves)


@functools.lru_cache(maxsize=1 << 14)  # values in, a value out: every point of a what-if
def gemm_traffic(gemm: GemmShape, tiling: Tiling, sizes: OperandBytes) -> Traffic:
    if tiling.order not in ORDERS:
        raise ValueError(f"tiling order must be one of {ORDERS}, got {tiling.order!r}")
    traffic = tiled_traffic(tiling.order, trip_counts(gemm, tiling), sizes, gemm.groups)
    return Traffic(a=int(traffic.a), b=int(traffic.b), c=int(traffic.c),
                   bursts=int(traffic.bursts), streams=int(traffic.streams))


def sram_footprint(tiling: Tiling, gemm: GemmShape, in_width: int, w_width: int,
                   acc_width: int, double_buffering: bool) -> int:
    """Bytes of SRAM the tiles occupy; double buffering holds two of each."""
    t = tiling.clipped(gemm)
    one = t.tm * t.tk * in_width + t.tk * t.tn * w_width + t.tm * t.tn * acc_width
    return one * (2 if double_buffering else 1)


def _whole_cycles(x: Any) -> Any:
    """Ceiling, as an int for one value and elementwise for the tiler's arrays."""
    up = np.ceil(x)
    return int(up) if np.ndim(up) == 0 else up


def transfer_cycles(nbytes: Any, bursts: Any, bytes_per_cycle: float,
                    latency_cycles: float, parts: tuple[Any, Any, Any] | None = None,
                    channels: Channels | None = None) -> Any:
    """DMA time: bytes at the DRAM bandwidth plus one latency per burst. With ``channels``,
    each of the streams' bytes (``parts``: input, weights, output) also at its own
    channel's rate, the slowest binding (Vela's per-memory access cycles: the larger of
    all bytes over the bandwidth and the busiest channel's bytes over its rate)."""
    moving = nbytes / bytes_per_cycle
    if channels is not None and parts is not None:
        a, b, c = parts
        moving = np.maximum(moving, np.maximum(np.maximum(a / channels.a, b / channels.b),
                                               np.maximum(c / channels.c, channels.fixed)))
    return _whole_cycles(moving + bursts * latency_cycles)


def overlap(compute: Any, memory: Any, double_buffering: bool, first_burst: Any) -> Any:
    """Layer time. With double buffering the DMA of tile i+1 overlaps compute on tile i, so
    the slower of the two sets the pace and only the first tile's load is exposed before
    compute can start; with a single buffer they alternate and add up."""
    if not double_buffering:
        return compute + memory
    paced = np.maximum(compute + np.minimum(first_burst, memory), memory)
    return int(paced) if np.ndim(paced) == 0 else paced


def tiled_cycles(compute: Any, traffic: Traffic, double_buffering: bool,
                 bytes_per_cycle: float, latency_cycles: float, floor: Any = 0,
                 channels: Channels | None = None) -> tuple[Any, Any]:
    """(memory cycles, body cycles) of an array kernel: its traffic's DMA time, overlapped
    with ``compute`` as the buffering allows, never under ``floor`` (the SRAM port's time).
    The one latency function of a tiled kernel: ``hardware.cost`` prices a kernel with it
    and ``hardware.tiling`` ranks a grid of tilings with it."""
    memory = transfer_cycles(traffic.total, exposed_latencies(traffic, double_buffering),
                             bytes_per_cycle, latency_cycles,
                             (traffic.a, traffic.b, traffic.c), channels)
    body = np.maximum(overlap(compute, memory, double_buffering,
                              memory // np.maximum(traffic.bursts, 1)), floor)
    return memory, (int(body) if np.ndim(body) == 0 else body)
