"""The compiler: graph + profile + compile config -> execution plan (a JSON-able dict).

Passes, in order (each a module of this package):
  fusion.fuse            group nodes into kernels
  placement.decide       check every kernel against the NPU's rules (split failed fusions)
  placement.place        greedy or min-cut optimal NPU/CPU assignment
  memory_plan.plan       activation buffers by lifetime, SRAM where they fit
  tiling (below)         fixed tiles from config, or hardware.tiling's search
  estimate (below)       hardware.cost per kernel, multi-core split, boundary transfers
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from omegaconf import DictConfig

from hardware.cost import (
    WIDTHS,
    KernelCost,
    auto_tiling,
    host_kernel_cost,
    npu_kernel_cost,
)
from hardware.memory import Tiling, sram_footprint
from hardware.profile import HardwareProfile
from ops.graph import Graph
from ops.registry import spec_for
from ops.work import ARRAY, Work
from pipeline.compiler import memory_plan
from pipeline.compiler.fusion import PATTERNS, fuse
from pipeline.compiler.kernel_work import SCHEME_PRECISION
from pipeline.compiler.placement import (
    CPU,
    GRAPH_IO_LAYOUT,
    NPU,
    Decision,
    decide,
    depthwise_on_vector,
    needs_conversion,
    place,
    tensor_bytes,
    transfer_cycles,
)
from pipeline.errors import UserError

PLAN_VERSION = "npuflow.plan/1"


def _enabled_patterns(cfg: DictConfig) -> dict[str, bool]:
    patterns = cfg.get("fusion_patterns") or {}
    return {p: bool(cfg.fusion) and bool(patterns.get(p, True)) for p in PATTERNS}


def _buffers(decisions: list[Decision], graph: Graph) -> list[memory_plan.Buffer]:
    producer = {t: i for i, d in enumerate(decisions) for t in d.kernel.outputs}
    last_use: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for j, d in enumerate(decisions):
        for t in d.kernel.inputs:
            last_use[t] = j
            readers.setdefault(t, []).append(j)
    buffers = []
    for t in dict.fromkeys([*graph.inputs, *producer]):
        start = producer.get(t, -1)
        end = len(decisions) if t in graph.outputs else last_use.get(t, start)
        prec = decisions[start].precision if start >= 0 else decisions[readers[t][0]].precision \
            if t in readers else "fp32"
        on_npu = start >= 0 and decisions[start].target == NPU and t not in graph.outputs \
            and all(decisions[j].target == NPU for j in readers.get(t, []))
        buffers.append(memory_plan.Buffer(t, tensor_bytes(t, graph, prec), start, end,
                                          want_sram=on_npu))
    return buffers


def _fixed_tiling(d: Decision, cfg: DictConfig) -> Tiling:
    t = cfg.tiling
    override = (t.get("overrides") or {}).get(d.kernel.name, {})
    g = d.work.gemm
    assert g is not None
    return Tiling(int(override.get("tile_m", t.tile_m or g.m)),
                  int(override.get("tile_n", t.tile_n or g.n)),
                  int(override.get("tile_k", t.tile_k or g.k)),
                  str(override.get("order", t.get("order", "mnk")))).clipped(g)


def _per_core(work: Work, cores: int) -> Work:
    """Split output channels (array) or elements (vector) across cores; every core reads
    the whole input of a channel split, which is the cost of tensors crossing cores."""
    if cores <= 1:
        return work
    if work.gemm is not None and work.gemm.n >= cores:
        g = work.gemm
        gemm = dataclasses.replace(g, n=math.ceil(g.n / cores))
        return dataclasses.replace(work, gemm=gemm, macs=math.ceil(work.macs / cores),
                                   weight_elems=math.ceil(work.weight_elems / cores),
                                   output_elems=math.ceil(work.output_elems / cores))
    if work.gemm is None:
        return dataclasses.replace(
            work, vector_ops=math.ceil(work.vector_ops / cores),
            input_elems=math.ceil(work.input_elems / cores),
            output_elems=math.ceil(work.output_elems / cores))
    return work


def _npu_cost(d: Decision, profile: HardwareProfile, cfg: DictConfig, a_dram: bool,
              c_dram: bool, weights_resident: bool, tile_budget: int
              ) -> tuple[KernelCost, Tiling | None, int]:
    cores = profile.cores if (d.work.gemm is None or d.work.gemm.n >= profile.cores) else 1
    work = _per_core(d.work, cores)
    if weights_resident:
        work = dataclasses.replace(work, weight_elems=0)
    core_profile = dataclasses.replace(
        profile, dram=dataclasses.replace(profile.dram,
                                          bandwidth_gbps=profile.dram.bandwidth_gbps / cores))
    on_vector = depthwise_on_vector(d, profile)
    tiling = None
    if work.unit == ARRAY and not on_vector:
        if cfg.tiling.mode == "fixed":
            tiling = _fixed_tiling(d, cfg)
            act_w, wt_w, acc_w = WIDTHS[d.precision]
            need = sram_footprint(tiling, work.gemm, act_w, wt_w, acc_w,
                                  profile.dma.double_buffering)
            if need > tile_budget:
                raise UserError(
                    f"compile.tiling: kernel '{d.kernel.name}' needs {need} bytes of SRAM for "
                    f"tiles {tiling.tm}x{tiling.tn}x{tiling.tk}"
                    f"{' (double-buffered)' if profile.dma.double_buffering else ''}; "
                    f"the tile budget is {tile_budget} bytes")
        else:
            tiling = auto_tiling(work, d.precision, core_profile, cfg.tiling.objective,
                                 a_dram, c_dram, sram_bytes=tile_budget).tiling
    cost = npu_kernel_cost(work, d.precision, core_profile, tiling, a_dram, c_dram, on_vector)
    if cores > 1:  # bytes and energy of all cores; cycles are one core's (they run together)
        cost = dataclasses.replace(
            cost, macs=d.work.macs, dram_bytes=cost.dram_bytes * cores,
            compulsory_dram_bytes=cost.compulsory_dram_bytes * cores,
            sram_bytes=cost.sram_bytes * cores, energy_pj=cost.energy_pj * cores)
    return cost, tiling, cores


def _cost_dict(cost: KernelCost) -> dict[str, Any]:
    return {"compute_cycles": cost.compute_cycles, "memory_cycles": cost.memory_cycles,
            "overhead_cycles": cost.overhead_cycles, "total_cycles": cost.total_cycles,
            "dram_bytes": cost.dram_bytes, "compulsory_dram_bytes": cost.compulsory_dram_bytes,
            "sram_bytes": cost.sram_bytes, "energy_pj": cost.energy_pj,
            "mapping_efficiency": cost.mapping_efficiency, "bound": cost.bound,
            "unit": cost.unit}


def control_flow_nodes(graph: Graph, policy: str) -> list[str]:
    """Names of the If/Loop/Scan nodes, whose bodies the plan cannot cost: how many times a
    Loop runs or which branch an If takes is decided by run-time data, and a static NPU
    plan (like Vela's or RKNN's) has no place for it. ``policy='error'`` stops on the first
    one; ``'host'`` lets them run on the CPU, with only their own I/O costed."""
    if policy not in ("error", "host"):
        raise UserError(f"compile.control_flow: must be 'error' or 'host', got {policy!r}")
    nodes = [n for n in graph.nodes if n.subgraphs]
    if nodes and policy == "error":
        n = nodes[0]
        raise UserError(
            f"compile: node '{n.name}' ({n.op_type}) is control flow, whose cost depends on "
            f"run-time data; export a static graph (fold or unroll it) or set "
            f"compile.control_flow=host to run it on the CPU uncosted")
    return [n.name for n in nodes]


def compile_graph(graph: Graph, profile: HardwareProfile, cfg: DictConfig,
                  quant_scheme: str, float_precision: str | None = None) -> dict[str, Any]:
    """``float_precision``: how float nodes compute; default from the quant scheme (a float
    graph compiled at the precision the quantize stage was asked for)."""
    float_precision = float_precision or SCHEME_PRECISION.get(quant_scheme, "fp32")
    uncosted = control_flow_nodes(graph, cfg.get("control_flow", "error"))
    kernels = fuse(graph, _enabled_patterns(cfg))
    decisions = decide(kernels, graph, profile, float_precision)
    placement = place(decisions, graph, profile, cfg.placement)

    sram_total = int(profile.sram.size_kb * 1024)
    act_budget = int(sram_total * cfg.memory.sram_fraction)
    buffers = memory_plan.plan(_buffers(decisions, graph), act_budget)
    weight_bytes = sum(d.work.weight_elems * WIDTHS.get(d.precision, WIDTHS["fp32"])[1]
                       for d in decisions if d.target == NPU)
    weights = cfg.memory.weights
    resident = weights == "resident" or (weights == "auto" and
                                         weight_bytes <= (sram_total - act_budget) // 2)
    tile_budget = sram_total - act_budget - (weight_bytes if resident else 0)
    where = {b.tensor: b for b in buffers}

    out_kernels = []
    producer = {t: i for i, d in enumerate(decisions) for t in d.kernel.outputs}
    for i, d in enumerate(decisions):
        a_dram = any(where[t].memory == "dram" for t in d.kernel.inputs if t in where)
        c_dram = any(where[t].memory == "dram" for t in d.kernel.outputs)
        tiling, cores = None, 1
        if d.target == NPU:
            cost, tiling, cores = _npu_cost(d, profile, cfg, a_dram, c_dram, resident,
                                            max(tile_budget, 0))
        else:
            cost = host_kernel_cost(d.work, profile, d.precision)
        g = d.work.gemm
        out_kernels.append({
            "id": i, "name": d.kernel.name, "ops": [n.name for n in d.kernel.nodes],
            "op_types": d.kernel.op_types, "pattern": d.kernel.pattern,
            "composite": d.kernel.composite, "family": spec_for(d.kernel.anchor).family,
            "target": d.target, "precision": d.precision,
            "layout": profile.layout if d.target == NPU else profile.host.layout,
            "unit": cost.unit, "macs": d.work.macs,
            "gemm": None if g is None else {"m": g.m, "k": g.k, "n": g.n, "groups": g.groups},
            "tiling": None if tiling is None else dataclasses.asdict(tiling),
            "cores": cores, "inputs": d.kernel.inputs, "outputs": d.kernel.outputs,
            "deps": sorted({producer[t] for t in d.kernel.inputs if t in producer}),
            "cost": _cost_dict(cost),
            "checks": [{"node": n, "rule": r.rule, "text": r.text, "passed": r.passed,
                        "detail": r.detail} for n, r in d.checks],
            "moved_by_optimizer": d.moved_by_optimizer,
            "fused_form_failed": d.fused_form_failed,
            "fused_form": d.fused_ops or None,
            "fused_failed_checks": [{"node": n, "rule": r.rule, "text": r.text,
                                     "passed": r.passed, "detail": r.detail}
                                    for n, r in d.fused_checks],
            "npu_estimate_cycles": None if math.isinf(d.npu_cycles) else d.npu_cycles,
            "cpu_estimate_cycles": d.cpu_cycles,
        })
    transfers = _transfers(out_kernels, graph, profile)
    return {
        "version": PLAN_VERSION,
        "graph": graph.name,
        "profile": profile.name,
        "frequency_mhz": profile.frequency_mhz,
        "inputs": graph.inputs,
        "outputs": graph.outputs,
        "placement": {"mode": cfg.placement, **placement},
        "uncosted_ops": uncosted,
        "kernels": out_kernels,
        "transfers": transfers,
        "buffers": [dataclasses.asdict(b) for b in buffers],
        "memory": {
            "sram_bytes": sram_total, "activation_budget_bytes": act_budget,
            "weights": "resident" if resident else "streamed", "weight_bytes": weight_bytes,
            "tile_budget_bytes": tile_budget,
            "sram_arena_peak_bytes": memory_plan.arena_peak(buffers, "sram"),
            "sram_live_peak_bytes": memory_plan.live_peak(buffers, "sram"),
            "sram_headroom": 1 - memory_plan.arena_peak(buffers, "sram") / max(act_budget, 1),
            "dram_arena_peak_bytes": memory_plan.arena_peak(buffers, "dram"),
            "spilled_to_dram": sorted(b.tensor for b in buffers
                                      if b.want_sram and b.memory == "dram"),
        },
    }


def _transfers(kernels: list[dict], graph: Graph, profile: HardwareProfile) -> list[dict]:
    """Every tensor hand-over between the host and the NPU, with its layout conversion."""
    producer = {t: k for k in kernels for t in k["outputs"]}
    host = {"target": CPU, "layout": GRAPH_IO_LAYOUT, "id": None, "precision": "fp32"}
    out, seen = [], set()
    edges = [(producer.get(t, host), k, t) for k in kernels for t in k["inputs"]]
    edges += [(producer[t], host, t) for t in graph.outputs if t in producer]
    for src, dst, t in edges:
        if src["target"] == dst["target"] or (t, dst["target"]) in seen:
            continue
        seen.add((t, dst["target"]))
        prec = src["precision"] if src["target"] == NPU else dst["precision"]
        nbytes = tensor_bytes(t, graph, prec)
        npu_side = src if src["target"] == NPU else dst
        host_layout = GRAPH_IO_LAYOUT if host in (src, dst) else profile.host.layout
        convert = needs_conversion(npu_side["layout"], host_layout,
                                   len(graph.tensors[t].shape or ()))
        cycles = transfer_cycles(nbytes, profile, convert)
        out.append({
            "tensor": t, "from": src["id"], "to": dst["id"],
            "direction": f"{src['target']}->{dst['target']}", "bytes": nbytes,
            "layout_conversion": (f"{src['layout']}->{dst['layout']}" if convert else None),
            "cycles": math.ceil(cycles),
        })
    return out
