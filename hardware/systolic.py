"""Systolic-array compute cycles for weight-, output- and input-stationary dataflows.

The model is SCALE-Sim's (Samajdar et al., ISPASS 2020; scalesim v3
``compute/systolic_compute_{ws,os,is}.py``), in closed form instead of per-cycle demand
matrices. A GEMM (M x K) @ (K x N) maps onto an R x C array as:

    dataflow   rows (Sr)   cols (Sc)   time (T)   stationary operand
    ws         K           N           M          weights
    os         M           N           K          outputs (partial sums)
    is         K           M           N          inputs

The array processes ceil(Sr/R) x ceil(Sc/C) folds one after the other. Each fold pays:
- ws / is: R cycles to load the stationary tile, T to stream, R - 1 + C - 1 of skew
  (fill) and drain: ``2R + C + T - 2``;
- os: nothing to preload; T to stream the reduction, then skew and drain: ``R + C + T - 2``.

SCALE-Sim reports one cycle fewer in total (the index of the last busy cycle); the
benchmark ``benchmarks/scalesim_agreement.py`` shows the difference layer by layer.
A precision that completes ``throughput`` MACs per PE per cycle streams T in
``ceil(T / throughput)`` cycles; fill and drain are pipeline depth and do not change.
Groups (depthwise / grouped conv, attention heads) run as independent GEMMs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ops.work import GemmShape


@dataclass(frozen=True)
class ArrayMapping:
    sr: int  # GEMM extent mapped onto array rows
    sc: int  # ... onto array columns
    t: int  # ... streamed in time


@dataclass(frozen=True)
class ComputeEstimate:
    cycles: int
    folds: int  # per group
    mapping_efficiency: float  # fraction of PEs holding useful work, averaged over folds


def map_gemm(gemm: GemmShape, dataflow: str) -> ArrayMapping:
    if dataflow == "ws":
        return ArrayMapping(sr=gemm.k, sc=gemm.n, t=gemm.m)
    if dataflow == "os":
        return ArrayMapping(sr=gemm.m, sc=gemm.n, t=gemm.k)
    if dataflow == "is":
        return ArrayMapping(sr=gemm.k, sc=gemm.m, t=gemm.n)
    raise ValueError(f"unknown dataflow {dataflow!r} (ws | os | is)")


def fold_cycles(rows: int, cols: int, stream: int, dataflow: str) -> int:
    preload = 0 if dataflow == "os" else rows
    return preload + stream + rows + cols - 2


def compute_cycles(gemm: GemmShape, rows: int, cols: int, dataflow: str,
                   throughput: float = 1.0) -> ComputeEstimate:
    """Cycles for ``gemm.groups`` GEMMs on an R x C array with ideal memory."""
    if throughput <= 0:
        raise ValueError("this precision does not run on the MAC array (throughput 0)")
    m = map_gemm(gemm, dataflow)
    row_folds, col_folds = math.ceil(m.sr / rows), math.ceil(m.sc / cols)
    folds = row_folds * col_folds
    stream = math.ceil(m.t / throughput)
    cycles = gemm.groups * folds * fold_cycles(rows, cols, stream, dataflow)
    efficiency = (m.sr * m.sc) / (folds * rows * cols)
    return ComputeEstimate(cycles=cycles, folds=folds, mapping_efficiency=efficiency)


@dataclass(frozen=True)
class ArrayAccesses:
    """Operand elements the array reads from / writes to SRAM (SCALE-Sim's SRAM counts)."""

    ifmap_reads: int
    filter_reads: int
    ofmap_writes: int


@functools.lru_cache(maxsize=1 << 14)  # a pure function of values: a sweep asks it again
def sram_accesses(gemm: GemmShape, rows: int, cols: int, dataflow: str) -> ArrayAccesses:
    """The stationary operand is read once; a streamed operand once per fold of the other
    spatial dimension; partial outputs are written once per fold of the reduction."""
    m = map_gemm(gemm, dataflow)
    row_folds, col_folds = math.ceil(m.sr / rows), math.ceil(m.sc / cols)
    a, b, c = gemm.m * gemm.k, gemm.k * gemm.n, gemm.m * gemm.n
    if dataflow == "ws":
        acc = ArrayAccesses(a * col_folds, b, c * row_folds)
    elif dataflow == "os":
        acc = ArrayAccesses(a * col_folds, b * row_folds, c)
    else:
        acc = ArrayAccesses(a, b * col_folds, c * row_folds)
    g = gemm.groups
    return ArrayAccesses(acc.ifmap_reads * g, acc.filter_reads * g, acc.ofmap_writes * g)
