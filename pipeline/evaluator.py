"""Re-cost one compiled plan across many values of the parameters that do not change it.

A design-space study asks "what if the clock were 800 MHz, the DRAM 8 GB/s, a dispatch
300 cycles" thousands of times. Each such question leaves the graph, the fusion, the
kernels' NPU/CPU placement, the memory plan and the weight cache as they are: only the
prices change. So the evaluator compiles once (the run's own plan, from its stage folders)
and for each point re-prices the placed kernels with ``driver.recost`` (the function the
compiler itself prices them with: tiling, core split and every formula are the same) and
replays one inference with ``simulator.metrics.inference_metrics`` (the simulate stage's).
A point's answer therefore equals a full run's with the same overrides whenever the full
run would place the kernels the same way; ``placement_held`` says whether the greedy
placement rule would still choose the held placement at that point (False: a full run may
move a kernel between NPU and CPU, and differ).

Parameters a point may set (anything else would change the plan and is refused):
``frequency_mhz``, ``dispatch_cycles``, ``dram.bandwidth_gbps``, ``dram.latency_ns``,
``dram.stream_gbps``,
``sram.bandwidth_bytes_per_cycle``, ``link.bandwidth_gbps``, ``link.sync_us``,
``host.gflops``, ``host.bandwidth_gbps``, ``host.transcendental_ns`` and every
``energy.*`` field (the energy per MAC per precision: ``energy.mac_pj.int8``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hardware.bounds import BoundsError
from hardware.profile import (
    PRECISIONS,
    HardwareProfile,
    ProfileError,
    profile_from_config,
    validate,
)
from ops.graph import Graph
from pipeline.compiler.costing import cpu_cost
from pipeline.compiler.driver import compile_decisions, layout, recost
from pipeline.compiler.placement import NPU, Decision, optimal_targets
from pipeline.compiler.plan import Plan
from pipeline.errors import UserError
from pipeline.simulator.metrics import inference_metrics

SECTIONS = {"dram": ("bandwidth_gbps", "latency_ns", "stream_gbps"),
            "sram": ("bandwidth_bytes_per_cycle",), "link": ("bandwidth_gbps", "sync_us"),
            "host": ("gflops", "bandwidth_gbps", "transcendental_ns")}
TOP_LEVEL = ("frequency_mhz", "dispatch_cycles")


@dataclass(frozen=True)
class Estimate:
    """One point's single-inference figures (the simulate stage's definitions)."""

    point: Mapping[str, float]
    latency_ms: float
    cycles_total: int
    energy_mj: float
    avg_power_w: float
    dram_bytes: int
    mac_utilization: float
    fallback_ms: float
    placement_held: bool  # False: a full run at this point may place kernels differently


class _Attrs(dict):
    """A plain mapping read like the DictConfig it was converted from (attribute access,
    ``.get``): OmegaConf's per-access checks were a fifth of a point's time."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(key) from exc


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return _Attrs({k: _plain(v) for k, v in value.items()})
    return value


def _number(key: str, value: Any, current: Any) -> float | int:
    """A point's value as the profile field it replaces holds it: a number (not a bool, not
    NaN), whole where the field is (dispatch cycles)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"evaluator: '{key}' must be a number, got {value!r}")
    if isinstance(current, int) and not isinstance(current, bool):
        if not float(value).is_integer():
            raise UserError(f"evaluator: '{key}' is a whole number of "
                            f"{key.rpartition('_')[2]}, got {value!r}")
        return int(value)
    return value


def _with(profile: HardwareProfile, point: Mapping[str, float]) -> HardwareProfile:
    """``profile`` with the point's values; a key outside the allowed set, a value that is
    not a number of the field's kind, or one its field's bounds refuse, is a UserError
    naming the key. An energy per MAC is per precision: ``energy.mac_pj.int8``."""
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    per_mac: dict[str, Any] = {}
    for key, value in point.items():
        section, _, name = key.partition(".")
        if not name and key in TOP_LEVEL:
            top[key] = _number(key, value, getattr(profile, key))
        elif section == "energy" and name.startswith("mac_pj.") and \
                name.partition(".")[2] in PRECISIONS:
            precision = name.partition(".")[2]
            per_mac[precision] = _number(key, value, getattr(profile.energy.mac_pj, precision))
        elif name and (name in SECTIONS.get(section, ()) or (
                section == "energy" and name != "mac_pj" and hasattr(profile.energy, name))):
            nested.setdefault(section, {})[name] = _number(
                key, value, getattr(getattr(profile, section), name))
        else:
            raise UserError(f"evaluator: '{key}' changes the plan or is not a profile "
                            f"parameter; allowed: {', '.join(allowed(profile))}")
    if per_mac:
        nested.setdefault("energy", {})["mac_pj"] = dataclasses.replace(
            profile.energy.mac_pj, **per_mac)
    for section, values in nested.items():
        top[section] = dataclasses.replace(getattr(profile, section), **values)
    try:
        return validate(dataclasses.replace(profile, **top))
    except (BoundsError, ProfileError) as exc:
        raise UserError(str(exc)) from exc


def allowed(profile: HardwareProfile) -> list[str]:
    return [*TOP_LEVEL, *(f"{s}.{n}" for s, names in SECTIONS.items() for n in names),
            *(f"energy.{f.name}" for f in dataclasses.fields(profile.energy)
              if f.name != "mac_pj"),
            *(f"energy.mac_pj.{p}" for p in PRECISIONS)]


_FORKED: PlanEvaluator | None = None  # the evaluator a forked worker inherits


def _evaluate_part(points: list[Mapping[str, float]]) -> list[Estimate]:
    assert _FORKED is not None
    return [_FORKED.evaluate(p) for p in points]


class PlanEvaluator:
    def __init__(self, decisions: list[Decision], graph: Graph, profile: HardwareProfile,
                 compile_cfg: DictConfig, plan: Plan) -> None:
        """``plan``: the compiled plan of ``decisions`` (its head and static fields are
        kept; each point re-prices its kernels, transfers and memory)."""
        self.decisions, self.graph, self.profile, self.base = decisions, graph, profile, plan
        self.cfg = _plain(OmegaConf.to_container(compile_cfg, resolve=True))
        self.targets = [d.target for d in decisions]
        # the memory plan and the weight cache depend on sizes, not on the prices a point
        # may change: laid out once
        self.layout = layout(decisions, graph, profile, self.cfg)
        self.entries: dict[int, dict[str, Any]] = {}

    @classmethod
    def from_result(cls, result: Any) -> PlanEvaluator:
        """From a run (``pipeline.api.Result``): the model its compile stage read, placed as
        that stage placed it."""
        cfg = result.config
        stages = [s for s in cfg.stages.order if s != "compile" and s != "simulate"]
        return cls.from_inputs({s: result.run_dir / s for s in stages
                                if (result.run_dir / s).is_dir()}, cfg)

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Path], cfg: DictConfig) -> PlanEvaluator:
        """From the stage folders compile read (upstream of it), with the run's config."""
        from pipeline.stages.compile import CompileStage

        upstream = {s: p for s, p in inputs.items() if s not in ("compile", "simulate")}
        profile = profile_from_config(cfg.hardware)
        _, graph, scheme, float_precision = CompileStage.compile_input(upstream, cfg)
        decisions, plan = compile_decisions(graph, profile, cfg.compile, scheme,
                                            float_precision)
        return cls(decisions, graph, profile, cfg.compile, Plan.from_json(plan))

    def evaluate(self, point: Mapping[str, float]) -> Estimate:
        profile = _with(self.profile, point)
        plan = self.base.repriced(recost(self.decisions, self.graph, profile, self.cfg,
                                         self.layout, self.entries))
        _, _, m = inference_metrics(plan, profile)
        return Estimate(dict(point), m["latency_ms"], m["cycles_total"], m["energy_mj"],
                        m["avg_power_w"], m["dram_bytes"], m["mac_utilization"],
                        m["fallback_ms"], self._held(plan, profile))

    def evaluate_many(self, points: Iterable[Mapping[str, float]], workers: int = 1
                      ) -> list[Estimate]:
        """Every point, in order; ``workers`` > 1 splits them over forked processes that
        inherit the compiled plan (nothing is pickled but the points and the answers)."""
        points = list(points)
        if workers <= 1 or len(points) < 2 * workers:
            return [self.evaluate(p) for p in points]
        import multiprocessing

        global _FORKED
        _FORKED = self
        chunk = -(-len(points) // workers)
        parts = [points[i:i + chunk] for i in range(0, len(points), chunk)]
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            done = pool.map(_evaluate_part, parts)
        return [e for part in done for e in part]

    def _held(self, plan: Plan, profile: HardwareProfile) -> bool:
        """Would the compiler place the kernels as held at these prices? Greedy placement
        follows the op checks alone (prices never move a kernel); the min-cut of
        ``placement: optimal`` is re-solved with this point's prices."""
        if self.cfg.get("placement", "greedy") != "optimal":
            return True
        npu_cycles = [d.npu_cycles for d in self.decisions]
        for d, k in zip(self.decisions, plan.kernels, strict=True):
            if d.target == NPU:
                d.npu_cycles = float(k.cost.total_cycles)
            d.cpu_cycles = float(cpu_cost(d.work, d.precision, profile).total_cycles)
        try:
            return optimal_targets(self.decisions, self.graph, profile) == self.targets
        finally:
            for d, cycles in zip(self.decisions, npu_cycles, strict=True):
                d.npu_cycles = cycles
