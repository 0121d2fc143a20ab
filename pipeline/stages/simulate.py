"""Simulate: plan + hardware profile -> timeline, metrics, per-kernel CSV, plots."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig
from rich.table import Table

from hardware.profile import HardwareProfile, profile_from_config
from pipeline.artifacts import read_csv, write_json, write_text
from pipeline.compiler.plan import Plan, read_plan
from pipeline.errors import UserError
from pipeline.llm import phases
from pipeline.llm import source as llm_source
from pipeline.reports.terminal import CONSOLE
from pipeline.simulator import plots, report, sustained
from pipeline.simulator.metrics import band_sentence, breakdown_ms, inference_metrics
from pipeline.simulator.replay import FrameCosts, build, dma_lane
from pipeline.simulator.timeline import Task, critical_path, schedule
from pipeline.simulator.trace import chrome_trace
from pipeline.stages.base import Stage, StageInputs, StageResult

log = logging.getLogger(__name__)


class SimulateStage(Stage):
    name = "simulate"
    version = "1"
    # compile and quant: the sustained run re-costs the plan at each clock (PlanEvaluator)
    config_keys = ("simulate", "hardware", "compile", "quant")
    produces = frozenset({
        "avg_power_w", "batch", "cold_start_ms", "critical_path_kernels", "cycles_excluding_io",
        "cycles_total",
        "dram_bytes", "energy_mj", "energy_mj_per_image", "fallback_ms", "frames",
        "graph_io_ms", "latency_band_based_on", "latency_band_kind", "latency_band_pairs",
        "latency_ms",
        "latency_ms_high", "latency_ms_low", "mac_utilization", "npu_busy_ms",
        "peak_sram_bytes", "peak_temperature_c", "shutdown_s", "sram_hit_rate",
        "sustained_fps", "sustained_latency_ms", "sustained_power_w", "throttle_onset_s",
        "throughput_fps", "throughput_ips",
        # model=llm (pipeline/llm/phases.py)
        "decode_ms_per_token", "decode_tokens_per_s", "memory_activations_mb",
        "memory_kv_cache_mb", "memory_mb", "memory_weights_mb", "prefill_tokens_per_s",
        "ttft_ms",
    })

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        plan_path = inputs.get("compile", Path("-")) / "plan.json"
        if not plan_path.is_file():
            raise UserError("stages.order: simulate needs compile/plan.json (run compile first)")
        plan = read_plan(plan_path)
        profile = profile_from_config(cfg.hardware)
        if plan.profile != profile.name:
            raise UserError(f"hardware: plan was compiled for '{plan.profile}', "
                            f"not '{profile.name}'")
        sim = cfg.simulate
        hz = profile.frequency_mhz * 1e6
        costs = FrameCosts(math.ceil(sim.preprocess_ms * 1e-3 * hz),
                           math.ceil(sim.postprocess_ms * 1e-3 * hz))

        single, _, metrics = inference_metrics(plan, profile)
        llm = self._llm(inputs, cfg, plan, profile, metrics, out_dir)

        frames = build(plan, profile, sim.frames, sim.pipeline_depth, costs)
        span = schedule(frames)
        metrics["throughput_fps"] = sim.frames / (span / hz) if span else 0.0
        metrics["frames"] = sim.frames
        # a frame is one inference of the compiled shape: batch images
        batch = metrics["batch"] = plan.batch
        metrics["throughput_ips"] = metrics["throughput_fps"] * batch
        metrics["energy_mj_per_image"] = metrics["energy_mj"] / batch
        parts = breakdown_ms(frames, profile.frequency_mhz)
        parts = {k: v / sim.frames for k, v in parts.items()}  # per frame

        critical = set(critical_path(single))
        metrics["critical_path_kernels"] = sum(1 for i in critical
                                               if single[i].category in ("npu", "cpu_fallback"))
        dma = dma_lane(plan, single, profile.dma.double_buffering)
        rows = report.layer_rows(plan, single)
        report.write_layers_csv(out_dir / "layers.csv", rows)
        write_json(out_dir / "timeline.json", [
            {"name": t.name, "resource": t.resource, "category": t.category,
             "start": t.start, "end": t.end, "critical": i in critical}
            for i, t in enumerate(single + dma)], rows=True)
        write_json(out_dir / "breakdown.json", parts)
        write_text(out_dir / "breakdown.md", report.breakdown_markdown(parts))
        if sim.plots is not False:  # None (auto): the CLI sets False for a sweep job
            plots.draw(single + dma, rows, plan, profile, metrics["latency_ms"], out_dir)
        if sim.sustained.seconds > 0:
            host_ms = sim.preprocess_ms + sim.postprocess_ms + metrics["fallback_ms"]
            metrics.update(sustained.simulate(plan, self._time_at(inputs, cfg), profile,
                                              sim.sustained, out_dir, sim.plots is not False,
                                              host_s=host_ms * 1e-3))
        write_json(out_dir / "trace.json", chrome_trace(
            plan, {"single inference": single + dma, "throughput run": frames, **llm},
            profile.frequency_mhz, {single[i].name for i in critical},
            read_csv(out_dir / "sustained.csv") if sim.sustained.seconds > 0 else None),
            compact=True)
        if not llm:  # a language model's answer is its own table (_llm); a frame means little
            self._print(metrics, parts)
        return StageResult(metrics)

    @staticmethod
    def _llm(inputs: StageInputs, cfg: DictConfig, plan: Plan, profile: HardwareProfile,
             metrics: dict, out_dir: Path) -> dict[str, list[Task]]:
        """A language model's prefill / decode metrics and ``llm.json`` (pipeline/llm);
        its ``latency_ms`` is then the mean time per generated token, and the CNN check
        pairs' band does not apply. Returns the phases' tasks for the trace."""
        info = llm_source.recorded(inputs)
        if info is None:
            return {}
        run = cfg.simulate.llm
        compiled = inputs.get("compile", Path("-")) / "llm.json"
        at = json.loads(compiled.read_text()) if compiled.is_file() else info
        if (at["prompt_tokens"], at["new_tokens"]) != (run.prompt_tokens, run.new_tokens):
            raise UserError(
                f"compile.llm ({at['prompt_tokens']}, {at['new_tokens']}): the phases were "
                f"compiled for other token counts than simulate.llm's ({run.prompt_tokens}, "
                f"{run.new_tokens}); leave compile.llm to follow simulate.llm")
        result, tasks = phases.estimate(
            plan, profile, llm_source.spec_from_record(info), run.prompt_tokens,
            run.new_tokens, info["lm_head_chunks"], phases.Precision.of(cfg.quant),
            run.max_context)
        metrics.update(result["metrics"])
        metrics["latency_ms"] = result["metrics"]["decode_ms_per_token"]
        for key in [k for k in metrics if k.startswith("latency_ms_") or
                    k.startswith("latency_band")]:
            del metrics[key]
        write_json(out_dir / "llm.json", result["breakdown"])
        m = result["metrics"]
        log.info("language model: TTFT %.1f ms (%.0f prompt tokens/s), decode %.2f tokens/s, "
                 "memory %.0f MB (weights %.0f, KV cache %.1f)", m["ttft_ms"],
                 m["prefill_tokens_per_s"], m["decode_tokens_per_s"], m["memory_mb"],
                 m["memory_weights_mb"], m["memory_kv_cache_mb"])
        if not CONSOLE.quiet:  # a sweep job prints nothing
            table = Table(title=f"language model on {profile.name}")
            for column in ("figure", "value", "made of"):
                table.add_column(column, justify="right" if column == "value" else "left")
            for row in phases.summary_rows(result):
                table.add_row(*row)
            CONSOLE.print(table)
        return {phases.TRACE_RUNS[p]: t for p, t in tasks.items()}

    @staticmethod
    def _time_at(inputs: StageInputs, cfg: DictConfig) -> Callable[[float], float]:
        """A frame's seconds at a clock: the plan re-costed there (the evaluator's
        ``driver.recost``), as the chip runs the same compiled model when throttled."""
        from pipeline.evaluator import PlanEvaluator

        evaluator = PlanEvaluator.from_inputs(inputs, cfg)
        return lambda mhz: evaluator.evaluate({"frequency_mhz": mhz}).latency_ms * 1e-3

    @staticmethod
    def _print(metrics: dict, parts: dict[str, float]) -> None:
        if CONSOLE.quiet:  # a sweep job
            return
        table = Table(title="where the time goes (per frame)")
        table.add_column("stage")
        table.add_column("ms", justify="right")
        table.add_column("share", justify="right")
        total = sum(parts.values()) or 1.0
        for name, ms in parts.items():
            table.add_row(name, f"{ms:.3f}", f"{100 * ms / total:.1f}%")
        CONSOLE.print(table)
        log.info("latency %.3f ms, %.1f fps, MAC utilization %.1f%%, energy %.3f mJ",
                 metrics["latency_ms"], metrics["throughput_fps"],
                 100 * metrics["mac_utilization"], metrics["energy_mj"])
        if "latency_ms_low" in metrics:
            log.info(band_sentence(metrics))
