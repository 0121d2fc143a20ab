"""The compiler: graph + profile + compile config -> execution plan (a JSON-able dict).

Passes, in order (each a module of this package):
  fusion.fuse            group nodes into kernels (what fuses is the profile's epilogue)
  placement.decide       check every kernel against the NPU's rules (split failed fusions)
  placement.place        greedy or min-cut optimal NPU/CPU assignment
  memory_plan.plan       activation buffers by lifetime, SRAM where they fit
  weights.weight_dram_bytes  cached on chip (the profile's weight cache) or streamed, compressed
  costing.npu_cost       tiling and one cost per kernel (placement prices with the same)
  _transfers (below)     NPU <-> CPU hand-overs with their layout conversions

One file of ~350 lines: the order of these passes is the compiler, and reading it in
one place is the point; each pass's own logic lives in its module.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hardware.cost import KernelCost
from hardware.memory import Tiling
from hardware.profile import HardwareProfile
from ops.graph import Graph
from ops.registry import spec_for
from pipeline.compiler import memory_plan
from pipeline.compiler.costing import CostContext, cpu_cost, npu_cost, running_ops
from pipeline.compiler.fusion import PATTERNS, fuse
from pipeline.compiler.kernel_work import SCHEME_PRECISION
from pipeline.compiler.placement import (
    CPU,
    NPU,
    Decision,
    decide,
    hand_over,
    hand_over_precision,
    nets,
    place,
    tensor_bytes,
)
from pipeline.compiler.plan import PLAN_VERSION
from pipeline.compiler.weights import held_weight_bytes, weight_dram_bytes
from pipeline.errors import UserError


def _enabled_patterns(cfg: DictConfig, profile: HardwareProfile) -> dict[str, bool]:
    """Patterns on in config; a residual Add fuses only where the profile's output stage
    can add a second tensor (``epilogue.residual_add``)."""
    patterns = cfg.get("fusion_patterns") or {}
    enabled = {p: bool(cfg.fusion) and bool(patterns.get(p, True)) for p in PATTERNS}
    enabled["residual"] = enabled["residual"] and profile.epilogue.residual_add
    return enabled


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


def _fixed_tiling(d: Decision, tiling: dict[str, Any]) -> Tiling | None:
    """The tiles ``compile.tiling`` fixes for a kernel (``tiling``: that section as plain
    values, read once per costing: OmegaConf's attribute access per kernel was a tenth of
    a fixed-tile compile)."""
    g = d.work.gemm
    if tiling["mode"] != "fixed" or g is None:
        return None
    override = (tiling.get("overrides") or {}).get(d.kernel.name) or {}
    return Tiling(int(override.get("tile_m") or tiling["tile_m"] or g.m),
                  int(override.get("tile_n") or tiling["tile_n"] or g.n),
                  int(override.get("tile_k") or tiling["tile_k"] or g.k),
                  str(override.get("order") or tiling["order"])).clipped(g)


def _cost_dict(cost: KernelCost) -> dict[str, Any]:
    return {"compute_cycles": cost.compute_cycles, "memory_cycles": cost.memory_cycles,
            "overhead_cycles": cost.overhead_cycles, "total_cycles": cost.total_cycles,
            "dram_bytes": cost.dram_bytes, "compulsory_dram_bytes": cost.compulsory_dram_bytes,
            "weight_dram_bytes": cost.weight_dram_bytes, "lut_cycles": cost.lut_cycles,
            "sram_bytes": cost.sram_bytes, "energy_pj": cost.energy_pj,
            "mapping_efficiency": cost.mapping_efficiency, "bound": cost.bound,
            "unit": cost.unit}


def _name(choice: Any) -> str:
    """A config choice as the plan writes it: an enum's name, or the string itself."""
    return str(getattr(choice, "name", choice))


def control_flow_nodes(graph: Graph, policy: str) -> list[str]:
    """Names of the If/Loop/Scan nodes, whose bodies the plan cannot cost: how many times a
    Loop runs or which branch an If takes is decided by run-time data, and a static NPU
    plan (like Vela's or RKNN's) has no place for it. ``policy='error'`` stops on the first
    one; ``'host'`` lets them run on the CPU, with only their own I/O costed."""
    nodes = [n for n in graph.nodes if n.subgraphs]
    if nodes and policy == "error":
        n = nodes[0]
        raise UserError(
            f"compile: node '{n.name}' ({n.op_type}) is control flow, whose cost depends on "
            f"run-time data; export a static graph (fold or unroll it) or set "
            f"compile.control_flow=host to run it on the CPU uncosted")
    return [n.name for n in nodes]


def batch_size(graph: Graph) -> int:
    """Images per inference: the leading dim of the first input when it has a batch axis
    (rank >= 2; a BERT's [1, seq] is one sequence), else 1."""
    first = graph.tensor(graph.inputs[0]) if graph.inputs else None
    shape = first.shape if first is not None else None
    return int(shape[0]) if shape and len(shape) >= 2 and shape[0] > 0 else 1


def compile_graph(graph: Graph, profile: HardwareProfile, cfg: DictConfig,
                  quant_scheme: str, float_precision: str | None = None) -> dict[str, Any]:
    """``float_precision``: how float nodes compute; default from the quant scheme (a float
    graph compiled at the precision the quantize stage was asked for)."""
    return compile_decisions(graph, profile, cfg, quant_scheme, float_precision)[1]


def compile_decisions(graph: Graph, profile: HardwareProfile, cfg: DictConfig,
                      quant_scheme: str, float_precision: str | None = None
                      ) -> tuple[list[Decision], dict[str, Any]]:
    """The plan and the placed kernels it was costed from (what ``recost`` re-prices)."""
    float_precision = _name(float_precision or SCHEME_PRECISION.get(quant_scheme, "fp32"))
    uncosted = control_flow_nodes(graph, cfg.get("control_flow", "error"))
    kernels = fuse(graph, _enabled_patterns(cfg, profile),
                   epilogue_activations=frozenset(profile.epilogue.activations),
                   vector_chains=profile.vector_unit.chains,
                   lut_activations=frozenset(profile.epilogue.lut_activations))
    decisions = decide(kernels, graph, profile, float_precision)
    placement, body = _place(decisions, _cost_plan(decisions, graph, profile, cfg), graph,
                             profile, cfg)
    return decisions, {
        "version": PLAN_VERSION,
        "graph": graph.name,
        "profile": profile.name,
        "frequency_mhz": profile.frequency_mhz,
        "inputs": graph.inputs,
        "outputs": graph.outputs,
        "batch": batch_size(graph),
        "placement": {"mode": _name(cfg.placement), **placement},
        "uncosted_ops": uncosted,
        **body,
    }


def recost(decisions: list[Decision], graph: Graph, profile: HardwareProfile,
           cfg: DictConfig, fixed: Layout | None = None,
           static: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The plan body (kernels, transfers, memory) of placed kernels on ``profile``: the
    placement held, everything else priced as ``compile_graph`` prices it; ``fixed``, the
    layout (``layout``) of a profile that differs only in prices, is reused, and so are
    the kernels' ``static`` entries."""
    return _cost_plan(decisions, graph, profile, cfg, fixed, static)


def _place(decisions: list[Decision], greedy: dict[str, Any], graph: Graph,
           profile: HardwareProfile, cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Greedy or min-cut placement, priced with the greedy plan's own kernel costs (the
    memory plan and weight cache included), so placement and the final plan agree on what
    a kernel costs. The cut's assignment is kept only if its final plan is faster; the
    reported estimates are final plans' serial cycles. Returns the placement summary and
    the plan body of the targets it settled on."""
    for d, k in zip(decisions, greedy["kernels"], strict=True):
        if d.target == NPU:
            d.npu_cycles = float(k["cost"]["total_cycles"])
    greedy_targets = [d.target for d in decisions]
    placement = place(decisions, graph, profile, cfg.placement)
    placement["greedy_cycles"] = placement["optimal_cycles"] = _serial_cycles(greedy)
    if not placement["moved"]:
        return placement, greedy
    moved = _cost_plan(decisions, graph, profile, cfg)
    if _serial_cycles(moved) < placement["greedy_cycles"]:
        return {**placement, "optimal_cycles": _serial_cycles(moved)}, moved
    for d, target in zip(decisions, greedy_targets, strict=True):
        d.target, d.moved_by_optimizer = target, False
    return {**placement, "moved": 0}, greedy


def _serial_cycles(body: dict[str, Any]) -> int:
    """Every kernel and hand-over one after the other: the plan's serial estimate (the
    simulated latency is at most this; independent branches may overlap)."""
    return sum(k["cost"]["total_cycles"] for k in body["kernels"]) + \
        sum(t["cycles"] for t in body["transfers"])


# the SRAM bytes feature maps may take, by where the profile keeps the arena (None: all)
ARENA_LIMIT = {"sram": None, "dram": 0}


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the plan keeps things, which prices do not change: the activation buffers
    (SRAM or DRAM), the weights cached on chip and the DRAM bytes of the streamed ones."""

    buffers: list[memory_plan.Buffer]
    weight_held: list[int]  # per kernel: its weights as held (weights.held_weight_bytes)
    weight_dram: list[int | None]
    cached: int
    sram_total: int
    act_budget: int

    # the plan's buffer entries and arena figures, computed once per layout: the batch
    # evaluator reuses one layout for every point (never edited: a plan body only reads them)
    @functools.cached_property
    def buffer_entries(self) -> list[dict[str, Any]]:
        return [dataclasses.asdict(b) for b in self.buffers]

    @functools.cached_property
    def arena_figures(self) -> dict[str, Any]:
        sram_peak = memory_plan.arena_peak(self.buffers, "sram")
        return {"sram_arena_peak_bytes": sram_peak,
                "sram_live_peak_bytes": memory_plan.live_peak(self.buffers, "sram"),
                "sram_headroom": 1 - sram_peak / max(self.act_budget, 1),
                "dram_arena_peak_bytes": memory_plan.arena_peak(self.buffers, "dram"),
                "spilled_to_dram": sorted(b.tensor for b in self.buffers
                                          if b.want_sram and b.memory == "dram")}


def layout(decisions: list[Decision], graph: Graph, profile: HardwareProfile,
           cfg: DictConfig) -> Layout:
    sram_total = int(profile.sram.size_kb * 1024)
    act_budget = int(sram_total * cfg.memory.sram_fraction)
    buffers = memory_plan.plan(_buffers(decisions, graph),
                               ARENA_LIMIT.get(profile.sram.arena, act_budget))
    held = [held_weight_bytes(d, graph) for d in decisions]
    weight_dram, cached = weight_dram_bytes(
        decisions, graph, profile, cfg.memory.weights,
        sram_total - memory_plan.arena_peak(buffers, "sram"), held)
    return Layout(buffers, held, weight_dram, cached, sram_total, act_budget)


def _cost_plan(decisions: list[Decision], graph: Graph, profile: HardwareProfile,
               cfg: DictConfig, fixed: Layout | None = None,
               static: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Memory plan, weights, tiling and the cost of every kernel for the current targets
    (``fixed``: the memory plan and weights already laid out; ``static``: the kernels'
    price-independent plan entries, kept across calls)."""
    lay = fixed or layout(decisions, graph, profile, cfg)
    buffers, sram_total, act_budget = lay.buffers, lay.sram_total, lay.act_budget
    weight_bytes = sum(held for d, held in zip(decisions, lay.weight_held, strict=True)
                       if d.target == NPU)
    tile_budget = max(sram_total - act_budget, 0)
    where = {b.tensor: b for b in buffers}
    producer = {t: i for i, d in enumerate(decisions) for t in d.kernel.outputs}
    tiles = OmegaConf.to_container(cfg.tiling, resolve=True) \
        if isinstance(cfg.tiling, DictConfig) else dict(cfg.tiling)
    assert isinstance(tiles, dict)
    kernels = []
    for i, d in enumerate(decisions):
        tiling, cores = None, 1
        if d.target == NPU:
            ctx = CostContext(
                a_in_dram=any(where[t].memory == "dram" for t in d.kernel.inputs if t in where),
                c_to_dram=any(where[t].memory == "dram" for t in d.kernel.outputs),
                weight_bytes=lay.weight_dram[i], tile_budget=tile_budget,
                tiling_mode=tiles["mode"], objective=tiles["objective"],
                fixed_tiling=_fixed_tiling(d, tiles))
            cost, tiling, cores = npu_cost(d.work, d.kernel.name, running_ops(d.kernel),
                                           d.precision, profile, ctx, d.depthwise)
        else:
            cost = cpu_cost(d.work, d.precision, profile)
        kernels.append(_kernel_entry(i, d, cost, tiling, cores, profile, producer, static,
                                     lay.weight_held[i]))
    return {
        "kernels": kernels,
        "transfers": _transfers(decisions, kernels, graph, profile),
        "buffers": lay.buffer_entries,
        "memory": {
            "sram_bytes": sram_total, "activation_budget_bytes": act_budget,
            "weights": _name(cfg.memory.weights),
            "weight_bytes": weight_bytes,
            "cached_weight_bytes": lay.cached,
            "streamed_weight_bytes": weight_bytes - lay.cached,
            "weight_dram_traffic_bytes": sum(k["cost"]["weight_dram_bytes"]
                                             for k in kernels),
            "tile_budget_bytes": tile_budget,
            **lay.arena_figures,
        },
    }


def _kernel_entry(i: int, d: Decision, cost: KernelCost, tiling: Tiling | None, cores: int,
                  profile: HardwareProfile, producer: dict[str, int],
                  static: dict[int, dict[str, Any]] | None, weight_bytes: int
                  ) -> dict[str, Any]:
    """The kernel's plan entry; ``static`` keeps the fields prices do not change across
    calls (the batch evaluator re-prices the same kernels thousands of times)."""
    base = static.get(i) if static is not None else None
    if base is None:
        base = _static_entry(i, d, profile, producer, weight_bytes)
        if static is not None:
            static[i] = base
    entry = dict(base)
    entry.update(unit=cost.unit, cost=_cost_dict(cost), cores=cores,
                 tiling=None if tiling is None else dataclasses.asdict(tiling))
    return entry


def _static_entry(i: int, d: Decision, profile: HardwareProfile, producer: dict[str, int],
                  weight_bytes: int) -> dict[str, Any]:
    g = d.work.gemm
    return {
        "id": i, "name": d.kernel.name, "label": d.kernel.label,
        "ops": [n.name for n in d.kernel.nodes],
        "op_types": d.kernel.op_types, "pattern": d.kernel.pattern,
        "composite": d.kernel.composite, "family": spec_for(d.kernel.anchor).family,
        "target": d.target, "precision": d.precision,
        "layout": _name(profile.layout if d.target == NPU else profile.host.layout),
        "unit": None, "macs": d.work.macs, "weight_bytes": weight_bytes,
        "depthwise": d.depthwise,
        "gemm": None if g is None else {"m": g.m, "k": g.k, "n": g.n, "groups": g.groups},
        "tiling": None, "cores": 1, "inputs": d.kernel.inputs, "outputs": d.kernel.outputs,
        "deps": sorted({producer[t] for t in d.kernel.inputs if t in producer}),
        "cost": None,
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
    }


def _transfers(decisions: list[Decision], kernels: list[dict], graph: Graph,
               profile: HardwareProfile) -> list[dict]:
    """Every tensor hand-over between the host and the NPU, with its layout conversion: one
    per net (``placement.nets``) and direction, to the first reader on the far side."""
    targets = [k["target"] for k in kernels]
    precisions = [k["precision"] for k in kernels]
    out = []
    for net in nets(decisions, graph):
        side = CPU if net.producer is None else targets[net.producer]
        far = next((c for c in net.consumers
                    if (CPU if c is None else targets[c]) != side), -1)
        if far == -1:
            continue
        h = hand_over(net.tensor, graph, profile,
                      hand_over_precision(net, precisions, side == CPU))
        src_layout, dst_layout = (profile.layout, h.host_layout) if side == NPU else \
            (h.host_layout, profile.layout)
        out.append({
            "tensor": net.tensor, "from": net.producer, "to": far,
            "direction": f"{side}->{NPU if side == CPU else CPU}", "bytes": h.nbytes,
            "layout_conversion": f"{src_layout}->{dst_layout}" if h.convert else None,
            "cycles": math.ceil(h.cycles),
        })
    return out
