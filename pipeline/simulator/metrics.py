"""The run's headline numbers from a scheduled timeline and its plan.

Definitions (stable names, documented in the README):
- latency_ms: makespan of one inference (no pre/post-processing) at the NPU clock;
- throughput_fps: frames / makespan of the multi-frame run with pre/post-processing; a
  frame is one inference of the compiled shape, ``batch`` images (the leading dim of the
  first input), so throughput_ips = throughput_fps x batch and energy_mj_per_image =
  energy_mj / batch (pipeline/stages/simulate.py);
- mac_utilization: useful MACs / (latency cycles x PEs of all cores);
- sram_hit_rate: 1 - DRAM bytes / on-chip operand bytes over NPU kernels (the share of
  the array's operand traffic that no DRAM transfer had to bring in), in [0, 1];
- dram_bytes: DRAM traffic of all kernels plus NPU <-> CPU transfers;
- energy_mj: NPU dynamic energy (MACs, SRAM, DRAM) + NPU static power x latency; the host
  CPU's own energy is not modelled (profiles carry no host power figures);
- fallback_ms: time spent in CPU kernels and in the transfers and layout conversions
  between NPU and CPU kernels (0 when every kernel runs on the NPU);
- graph_io_ms: the graph's inputs and outputs crossing between the application and the
  NPU (link and layout conversion), paid on every inference;
- cycles_excluding_io: the inference's makespan with that hand-over left out: what a
  compiler's own estimate counts (Vela's cycles are its command stream's, the input
  already in the arena), so the vendor-estimate comparisons use it;
- latency_ms_low / latency_ms_high: the band the measured latency of the profile's check
  pairs fell in around npuflow's (``latency_band``), with ``latency_band_pairs`` and
  ``latency_band_kind`` (board, vendor_estimate, leave_one_out) saying what it rests on;
- cold_start_ms: the first inference, which also loads the weights the plan caches on
  chip from DRAM (a cache that starts empty; streamed weights cost every inference), sets
  up the driver and uploads each kernel's commands (the profile's ``cold_start``);
- sustained_* (with ``simulate.sustained.seconds`` > 0): latency, fps and power at the end
  of the sustained run, throttle_onset_s, shutdown_s, peak_temperature_c
  (pipeline/simulator/sustained.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from hardware.energy import static_energy_pj
from hardware.profile import HardwareProfile
from pipeline.compiler.plan import Plan
from pipeline.simulator.replay import FrameCosts, build
from pipeline.simulator.timeline import Task, schedule

CATEGORIES = ("preprocess", "graph_io", "layout_conversion", "transfer", "npu",
              "cpu_fallback", "postprocess")


def breakdown_ms(tasks: list[Task], frequency_mhz: float) -> dict[str, float]:
    """Busy time per category (the seeds' stage breakdown), in ms."""
    busy: dict[str, int] = defaultdict(int)
    for t in tasks:
        busy[t.category] += t.duration
    return {c: busy.get(c, 0) / (frequency_mhz * 1e3) for c in CATEGORIES}


def cold_start_extra_ms(plan: Plan, profile: HardwareProfile) -> float:
    """What only the first inference pays: the weights the plan caches on chip, loaded
    once over DRAM; the driver's setup; each NPU kernel's command buffer, uploaded once
    (the profile's ``cold_start``; its numbers' sources are in ``based_on``)."""
    npu_kernels = sum(1 for k in plan.kernels if k.target == "npu")
    upload = (plan.memory.cached_weight_bytes
              + npu_kernels * profile.cold_start.command_bytes_per_kernel)
    return upload / (profile.dram.bandwidth_gbps * 1e6) + profile.cold_start.setup_us * 1e-3


def latency_metrics(plan: Plan, tasks: list[Task], makespan: int,
                    profile: HardwareProfile) -> dict[str, Any]:
    khz = profile.frequency_mhz * 1e3
    npu = [k for k in plan.kernels if k.target == "npu"]
    seconds = makespan / (khz * 1e3)
    dynamic_pj = sum(k.cost.energy_pj for k in npu)
    energy_mj = (dynamic_pj + static_energy_pj(seconds, profile.energy)) * 1e-9
    pes = profile.mac_array.rows * profile.mac_array.cols * profile.cores
    on_chip = sum(k.cost.sram_bytes for k in npu)
    npu_dram = sum(k.cost.dram_bytes for k in npu)
    parts = breakdown_ms(tasks, profile.frequency_mhz)
    return {
        "latency_ms": makespan / khz,
        "cycles_total": makespan,
        "mac_utilization": sum(k.macs for k in npu) / (makespan * pes) if makespan else 0.0,
        "sram_hit_rate": max(0.0, 1.0 - npu_dram / on_chip) if on_chip else 0.0,
        "dram_bytes": sum(k.cost.dram_bytes for k in plan.kernels)
        + sum(t.bytes for t in plan.transfers),
        "energy_mj": energy_mj,
        "avg_power_w": energy_mj * 1e-3 / seconds if seconds else 0.0,
        "fallback_ms": parts["cpu_fallback"] + parts["transfer"] + parts["layout_conversion"],
        "graph_io_ms": parts["graph_io"],
        "peak_sram_bytes": plan.memory.sram_arena_peak_bytes,
        "npu_busy_ms": parts["npu"],
        "cold_start_ms": makespan / khz + cold_start_extra_ms(plan, profile),
    }


def inference_metrics(plan: Plan, profile: HardwareProfile
                      ) -> tuple[list[Task], int, dict[str, Any]]:
    """One inference replayed and scheduled: its tasks, makespan and headline metrics
    (the simulate stage's and the batch evaluator's one definition)."""
    single = build(plan, profile, 1, 1, FrameCosts(0, 0))
    makespan = schedule(single)
    metrics = latency_metrics(plan, single, makespan, profile)
    io = any(t.category == "graph_io" and t.duration for t in single)
    metrics["cycles_excluding_io"] = schedule(  # copies: ``single`` keeps its schedule
        [replace(t, duration=0 if t.category == "graph_io" else t.duration)
         for t in single]) if io else makespan
    metrics.update(latency_band(metrics["latency_ms"], profile))
    return single, makespan, metrics


def band_sentence(metrics: dict[str, Any]) -> str:
    """The band in words, so that a band beside (or wholly below) ``latency_ms`` reads as
    what it is rather than as an error bar that misses its own estimate."""
    against = {"board": "board", "vendor_estimate": "vendor-estimate (not silicon)",
               "leave_one_out": "left-out calibration"}.get(metrics["latency_band_kind"], "")
    return (f"measured, this would read {metrics['latency_ms_low']:.3f}-"
            f"{metrics['latency_ms_high']:.3f} ms if the network errs as the profile's "
            f"{metrics['latency_band_pairs']} {against} check pairs did "
            "(latency_ms / their npuflow-to-measured ratios)")


def latency_band(latency_ms: float, profile: HardwareProfile) -> dict[str, Any]:
    """Where the measured latency fell, for the networks the profile has been checked on:
    latency / the highest and the lowest npuflow / measured ratio of its check pairs (or of
    a calibration's leave-one-out predictions; ``HardwareProfile.confidence``). Nothing
    for a profile without any."""
    band = profile.confidence
    if band.ratio_low is None or band.ratio_high is None or not band.pairs:
        return {}
    return {"latency_ms_low": latency_ms / band.ratio_high,
            "latency_ms_high": latency_ms / band.ratio_low,
            "latency_band_pairs": band.pairs, "latency_band_kind": str(band.kind),
            "latency_band_based_on": band.based_on}
