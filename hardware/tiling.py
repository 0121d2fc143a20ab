"""Tile-shape and loop-order search for one GEMM under an SRAM budget.

The search space is every (tm, tn, tk) with each tile a power of two (>= 8) or the full
dimension, times the six loop orders; :mod:`hardware.memory` gives each point's DRAM
traffic and SRAM footprint. The evaluation is vectorised over the tile grid with numpy, so
a search costs milliseconds (thousands of points) rather than seconds. The winner
minimises the objective (cycles, energy or energy-delay product) among the tilings whose
footprint fits; ties go to fewer DRAM bytes, then to the larger tiles, then to the first
order in ``ORDERS``, so the choice is deterministic.

Two exact shortcuts keep a compile (and the batch evaluator's thousands of re-costs) from
repeating the grid: without double buffering a kernel's cycles are compute + traffic /
bandwidth + bursts x latency, so when the whole GEMM fits the budget the full tile (least
traffic, fewest bursts, largest tile, first order) wins every objective outright; and a
search is a pure function of its arguments, so repeated layers and repeated prices reuse
the answer (``functools.lru_cache``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hardware.memory import ORDERS, OperandBytes, Tiling, refetch_factor


@dataclass(frozen=True)
class TilingChoice:
    tiling: Tiling
    dram_bytes: int
    bursts: int
    footprint: int
    fits: bool  # False: nothing fits the budget; the smallest-footprint tiling is returned


def candidates(dim: int, minimum: int = 8) -> np.ndarray:
    values = {dim}
    t = minimum
    while t < dim:
        values.add(t)
        t *= 2
    return np.array(sorted(values), dtype=np.int64)


@lru_cache(maxsize=65536)
def search(m: int, n: int, k: int, groups: int, sizes: OperandBytes, in_w: int, w_w: int,
           acc_w: int, sram_bytes: int, double_buffering: bool, bytes_per_cycle: float,
           latency_cycles: float, compute_cycles: int, objective: str = "cycles",
           energy_per_byte: float = 1.0, orders: tuple[str, ...] = ORDERS) -> TilingChoice:
    """Best tiling of a (groups x) M x K x N GEMM; see the module docstring."""
    whole = _whole(m, n, k, groups, sizes, in_w, w_w, acc_w, sram_bytes, double_buffering,
                   orders)
    if whole is not None:
        return whole
    return grid_search(m, n, k, groups, sizes, in_w, w_w, acc_w, sram_bytes,
                       double_buffering, bytes_per_cycle, latency_cycles, compute_cycles,
                       objective, energy_per_byte, orders)


def grid_search(m: int, n: int, k: int, groups: int, sizes: OperandBytes, in_w: int,
                w_w: int, acc_w: int, sram_bytes: int, double_buffering: bool,
                bytes_per_cycle: float, latency_cycles: float, compute_cycles: int,
                objective: str = "cycles", energy_per_byte: float = 1.0,
                orders: tuple[str, ...] = ORDERS) -> TilingChoice:
    """Every point of the tile grid x loop orders, evaluated (``search`` without its
    shortcuts)."""
    grid = np.meshgrid(candidates(m), candidates(n), candidates(k), indexing="ij")
    tm, tn, tk = (g.ravel() for g in grid)
    trips = {"m": -(-m // tm), "n": -(-n // tn), "k": -(-k // tk)}
    footprint = (tm * tk * in_w + tk * tn * w_w + tm * tn * acc_w) * (2 if double_buffering
                                                                      else 1)
    best: tuple | None = None
    for oi, order in enumerate(orders):
        fa, fb, fc = (refetch_factor(order, x, trips) for x in "abc")
        spill = (fc - 1) * 2 * sizes.c_elems * acc_w
        traffic = sizes.a * fa + sizes.b * fb + sizes.c + spill
        c_moves = (sizes.c + spill) > 0
        bursts = ((trips["m"] * trips["k"] * fa if sizes.a else 0)
                  + (trips["k"] * trips["n"] * fb if sizes.b else 0)
                  + trips["m"] * trips["n"] * (2 * fc - 1) * c_moves) * groups
        streams = int(sizes.a > 0) + int(sizes.b > 0) + c_moves
        exposed = streams if double_buffering else bursts
        memory = np.ceil(traffic / bytes_per_cycle + exposed * latency_cycles)
        if double_buffering:
            cycles = np.maximum(compute_cycles + memory / np.maximum(bursts, 1), memory)
        else:
            cycles = compute_cycles + memory
        energy = traffic * energy_per_byte
        score = {"cycles": cycles, "energy": energy, "edp": energy * cycles}[objective]
        fits = footprint <= sram_bytes
        pool = fits if fits.any() else footprint == footprint.min()
        keys = np.lexsort((-(tm * tn * tk), traffic, np.where(pool, score, np.inf)))
        i = keys[0]
        candidate = (float(score[i]), int(traffic[i]), -int(tm[i] * tn[i] * tk[i]), oi,
                     Tiling(int(tm[i]), int(tn[i]), int(tk[i]), order), int(bursts[i]),
                     int(footprint[i]), bool(fits.any()))
        if best is None or candidate[:4] < best[:4]:
            best = candidate
    assert best is not None
    return TilingChoice(tiling=best[4], dram_bytes=best[1], bursts=best[5],
                        footprint=best[6], fits=best[7])


def _whole(m: int, n: int, k: int, groups: int, sizes: OperandBytes, in_w: int, w_w: int,
           acc_w: int, sram_bytes: int, double_buffering: bool, orders: tuple[str, ...]
           ) -> TilingChoice | None:
    """The full tile when it fits and nothing is double-buffered (the grid's own winner,
    found without the grid), else None."""
    footprint = m * k * in_w + k * n * w_w + m * n * acc_w
    if double_buffering or footprint > sram_bytes:
        return None
    c_moves = sizes.c > 0
    bursts = (int(sizes.a > 0) + int(sizes.b > 0) + int(c_moves)) * groups
    return TilingChoice(tiling=Tiling(m, n, k, orders[0]), dram_bytes=sizes.a + sizes.b
                        + sizes.c, bursts=bursts, footprint=footprint, fits=True)


def fits_in_sram(footprint: int, sram_kb: float) -> bool:
    return footprint <= math.floor(sram_kb * 1024)
