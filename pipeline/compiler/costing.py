"""One kernel, one cost: the function placement, compile and (through the plan) simulate
all use to price a kernel on the NPU or the host.

Written here, not in ``hardware``, because it needs the compiler's view of a kernel (is it
depthwise, which op types it fuses, where its operands live); the formulas it composes
are ``hardware.cost``'s. The context says what the memory plan decided (input / output in
DRAM, the weights' DRAM bytes) and what SRAM the tiles may use. The compiler costs the
greedy plan with it, the min-cut placement prices NPU kernels with those very costs, and
a moved plan is costed again the same way (``driver._place``).

Multi-core NPUs (RK3588: 3 cores sharing one DRAM port) split a kernel only if its op
types are in ``multicore_ops`` (RKNN lists the ops that run on several cores); the split
is the cheaper of two: by output channels (each core reads the whole input and 1/cores
of the weights) or by output rows (each core reads 1/cores of the input and all the
weights). Cores run together, so a kernel takes one core's time, with the DRAM bandwidth
shared between them (``hardware.cost.staggered_cores``: how single-buffered cores share
it); bytes and energy are all cores'.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from hardware.cost import (
    WIDTHS,
    KernelCost,
    auto_tiling,
    host_kernel_cost,
    npu_kernel_cost,
    staggered_cores,
)
from hardware.memory import Tiling, sram_footprint
from hardware.profile import HardwareProfile
from ops.conv import is_depthwise
from ops.graph import Graph
from ops.work import ARRAY, Work
from pipeline.compiler.fusion import Kernel
from pipeline.errors import UserError


@dataclass(frozen=True)
class CostContext:
    a_in_dram: bool = True
    c_to_dram: bool = True
    weight_bytes: int | None = None  # DRAM bytes of the weights (None: uncompressed)
    tile_budget: int | None = None  # SRAM bytes the tiles may use (None: all of it)
    tiling_mode: str = "auto"
    objective: str = "cycles"
    fixed_tiling: Tiling | None = None


def depthwise_kernel(kernel: Kernel, graph: Graph, work: Work) -> bool:
    """A depthwise convolution (one input channel per group), or a spatial mean the
    profile runs as one (``kernel_work.mean_on_engine``)."""
    if work.gemm is None or work.gemm.groups <= 1:
        return False
    if kernel.anchor.op_type in ("ReduceMean", "GlobalAveragePool") and work.unit == ARRAY:
        return True
    if kernel.anchor.op_type != "Conv":
        return False
    try:
        return is_depthwise(kernel.anchor, graph)
    except (ValueError, KeyError, IndexError):
        return False


def running_ops(kernel: Kernel) -> list[str]:
    """The op types a kernel executes as operators of their own: BN and constant scales
    folded into its weights do not run, and the activation its output stage applies runs
    in the output stage of every core its convolution runs on."""
    return [n.op_type for n in kernel.nodes
            if n.name not in kernel.folded and n.name not in kernel.activation_nodes]


def splits_across_cores(op_types: list[str], profile: HardwareProfile) -> bool:
    if profile.cores <= 1:
        return False
    allowed = profile.multicore_ops
    return allowed is None or all(op in allowed for op in op_types)


def _ceil(value: int, parts: int) -> int:
    return math.ceil(value / parts)


def core_shares(work: Work, cores: int, depthwise: bool) -> list[Work]:
    """The per-core work of each way to split ``work`` over ``cores`` (empty: none)."""
    return list(_core_shares(work, cores, depthwise))


@functools.lru_cache(maxsize=4096)
def _core_shares(work: Work, cores: int, depthwise: bool) -> tuple[Work, ...]:
    """``core_shares``, remembered: a sweep or an evaluator prices the same kernels' work
    at every point (Work is frozen, so a share is a value)."""
    if cores <= 1:
        return ()
    shares = []
    g = work.gemm
    if g is None:
        return (dataclasses.replace(work, vector_ops=_ceil(work.vector_ops, cores),
                                    input_elems=_ceil(work.input_elems, cores),
                                    output_elems=_ceil(work.output_elems, cores)),)
    if depthwise and g.groups >= cores:  # channels: each core its own channels, whole maps
        shares.append(dataclasses.replace(
            work, gemm=dataclasses.replace(g, groups=_ceil(g.groups, cores)),
            macs=_ceil(work.macs, cores), input_elems=_ceil(work.input_elems, cores),
            weight_elems=_ceil(work.weight_elems, cores),
            output_elems=_ceil(work.output_elems, cores)))
    elif g.n >= cores:  # output channels: whole input, 1/cores of the weights
        shares.append(dataclasses.replace(
            work, gemm=dataclasses.replace(g, n=_ceil(g.n, cores)),
            macs=_ceil(work.macs, cores), weight_elems=_ceil(work.weight_elems, cores),
            output_elems=_ceil(work.output_elems, cores)))
    if g.m >= cores:  # output rows: 1/cores of the input, all the weights
        shares.append(dataclasses.replace(
            work, gemm=dataclasses.replace(g, m=_ceil(g.m, cores)),
            macs=_ceil(work.macs, cores), input_elems=_ceil(work.input_elems, cores),
            output_elems=_ceil(work.output_elems, cores)))
    return tuple(shares)


_SHARED: list[HardwareProfile] = []  # [profile, its port-shared twin]: the last one asked


def _port_shared(profile: HardwareProfile) -> HardwareProfile:
    """``profile`` with each core's share of the DRAM bandwidth (``cores`` cores on one
    port), made once per profile object rather than once per kernel: a plan prices every
    multi-core kernel against the same profile, and profiles are frozen values."""
    if not _SHARED or _SHARED[0] is not profile:
        dram = dataclasses.replace(profile.dram,
                                   bandwidth_gbps=profile.dram.bandwidth_gbps / profile.cores,
                                   stream_gbps=profile.dram.stream_gbps / profile.cores)
        _SHARED[:] = [profile, dataclasses.replace(profile, dram=dram)]
    return _SHARED[1]


def _one_core_cost(work: Work, name: str, precision: str, profile: HardwareProfile,
                   ctx: CostContext, depthwise: bool, weight_bytes: int | None
                   ) -> tuple[KernelCost, Tiling | None]:
    tiling = None
    on_array = work.unit == ARRAY and \
        (not depthwise or profile.mac_array.depthwise.unit == "array")
    if on_array:
        if ctx.tiling_mode == "fixed" and ctx.fixed_tiling is not None:
            tiling = ctx.fixed_tiling.clipped(work.gemm)
            act_w, wt_w, acc_w = WIDTHS[precision]
            need = sram_footprint(tiling, work.gemm, act_w, wt_w, acc_w,
                                  profile.dma.double_buffering)
            budget = ctx.tile_budget if ctx.tile_budget is not None else \
                int(profile.sram.size_kb * 1024)
            if need > budget:
                raise UserError(
                    f"compile.tiling: kernel '{name}' needs {need} bytes of SRAM for "
                    f"tiles {tiling.tm}x{tiling.tn}x{tiling.tk}"
                    f"{' (double-buffered)' if profile.dma.double_buffering else ''}; "
                    f"the tile budget is {budget} bytes")
        else:
            tiling = auto_tiling(work, precision, profile, ctx.objective, ctx.a_in_dram,
                                 ctx.c_to_dram, sram_bytes=ctx.tile_budget,
                                 weight_bytes=weight_bytes).tiling
    cost = npu_kernel_cost(work, precision, profile, tiling, ctx.a_in_dram, ctx.c_to_dram,
                           depthwise=depthwise, weight_bytes=weight_bytes)
    return cost, tiling


def npu_cost(work: Work, name: str, op_types: list[str], precision: str,
             profile: HardwareProfile, ctx: CostContext, depthwise: bool
             ) -> tuple[KernelCost, Tiling | None, int]:
    """The kernel's cost on the NPU: (cost, tiling, cores used)."""
    best = _one_core_cost(work, name, precision, profile, ctx, depthwise, ctx.weight_bytes)
    cores = 1
    if not splits_across_cores(op_types, profile):
        return best[0], best[1], cores
    n = profile.cores
    shared = _port_shared(profile)
    for share in core_shares(work, n, depthwise):
        wb = None if ctx.weight_bytes is None else \
            math.ceil(ctx.weight_bytes * share.weight_elems / max(work.weight_elems, 1))
        cost, tiling = _one_core_cost(share, name, precision, shared, ctx, depthwise, wb)
        if not profile.dma.double_buffering:
            cost = staggered_cores(cost, npu_kernel_cost(
                share, precision, profile, tiling, ctx.a_in_dram, ctx.c_to_dram,
                depthwise=depthwise, weight_bytes=wb))
        if cost.total_cycles < best[0].total_cycles:
            best = (dataclasses.replace(
                cost, macs=work.macs, dram_bytes=cost.dram_bytes * n,
                weight_dram_bytes=cost.weight_dram_bytes * n,
                compulsory_dram_bytes=cost.compulsory_dram_bytes * n,
                sram_bytes=cost.sram_bytes * n, energy_pj=cost.energy_pj * n), tiling)
            cores = n
    return best[0], best[1], cores


def cpu_cost(work: Work, precision: str, profile: HardwareProfile) -> KernelCost:
    return host_kernel_cost(work, profile, "fp32" if precision == "fp32" else precision)
