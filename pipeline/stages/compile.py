"""Compile: (quantized) ONNX + hardware profile -> execution plan, compile log, memory map."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import onnx
from omegaconf import DictConfig

from hardware.profile import profile_from_config
from ops.graph import QDQ_OPS, Graph
from ops.load import from_onnx
from pipeline import onnx_io
from pipeline.artifacts import file_digest, write_json, write_text
from pipeline.compiler import precision_curve
from pipeline.compiler.annotate import annotate
from pipeline.compiler.driver import compile_graph
from pipeline.compiler.plan import Plan, remember_plan
from pipeline.compiler.report import compile_log, fallback_summary, print_summary
from pipeline.llm import retarget
from pipeline.llm import source as llm_source
from pipeline.stages.base import Stage, StageInputs, StageResult, latest_model

log = logging.getLogger(__name__)


_GRAPHS: dict[str, Graph] = {}


def _graph(path: Path, model: onnx.ModelProto) -> Graph:
    """The model's graph, built once per process per file content: a sweep compiles the same
    quantized model at every point, and building the graph is a fifth of a compile. Safe to
    share: compiling reads a graph and never changes it (tests/test_compile.py)."""
    key = file_digest(path)
    if key not in _GRAPHS:
        if len(_GRAPHS) >= 8:
            _GRAPHS.clear()
        _GRAPHS[key] = from_onnx(model)
    return _GRAPHS[key]


class CompileStage(Stage):
    name = "compile"
    version = "3"  # a language model compiled at the run's contexts (compile/llm.json)
    config_keys = ("compile", "hardware", "quant")
    produces = frozenset({
        "auto_int8_latency_ms", "auto_latency_cost_ms", "compile_estimated_cycles", "cpu_ops",
        "fallback_kernels", "fallback_ops", "kernels", "layout_conversions", "npu_ops",
        "peak_sram_bytes", "placement_greedy_cycles", "placement_moved_kernels",
        "placement_optimal_cycles", "uncosted_ops", "weights_cached_bytes",
        "weights_dram_bytes",
    })

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        profile = profile_from_config(cfg.hardware)
        model, graph, scheme, float_precision = self.compile_input(inputs, cfg)
        written = compile_graph(graph, profile, cfg.compile, scheme, float_precision)
        plan = Plan.from_json(written)  # the writer's output checked against the types
        write_json(out_dir / "plan.json", written, rows=True)
        remember_plan(out_dir / "plan.json", plan)
        onnx_io.save_model(annotate(model, plan), out_dir / "model.annotated.onnx")
        write_json(out_dir / "memory.json", {"memory": written["memory"],
                                             "buffers": written["buffers"]})
        write_text(out_dir / "compile.log", compile_log(plan))
        llm = llm_source.recorded(inputs)
        if llm is not None:  # the contexts simulate costs the phases at
            write_json(out_dir / "llm.json", {
                "prompt_tokens": cfg.compile.llm.prompt_tokens,
                "new_tokens": cfg.compile.llm.new_tokens,
                "built_at": list(retarget.contexts(llm))})
        print_summary(plan)
        curve_metrics = self._precision_curve(inputs, cfg, profile, out_dir)
        kernels = plan.kernels
        npu = [k for k in kernels if k.target == "npu"]
        fallback = fallback_summary(plan)
        if plan.uncosted_ops:
            log.warning("control flow run on the CPU with its body uncosted: %s "
                        "(latency and energy exclude it)", ", ".join(plan.uncosted_ops))
        log.info("compiled %d kernels: %d on NPU, %d on CPU (compile/plan.json, "
                 "compile/compile.log)", len(kernels), len(npu), len(kernels) - len(npu))
        return StageResult({
            "kernels": len(kernels),
            "npu_ops": sum(len(k.ops) for k in npu),
            "cpu_ops": sum(len(k.ops) for k in kernels if k.target == "cpu"),
            "fallback_ops": [op for k in kernels if k.target == "cpu" for op in k.ops],
            "fallback_kernels": fallback["cpu_kernels"],
            "uncosted_ops": plan.uncosted_ops,
            "peak_sram_bytes": plan.memory.sram_arena_peak_bytes,
            "weights_cached_bytes": plan.memory.cached_weight_bytes,
            "weights_dram_bytes": plan.memory.weight_dram_traffic_bytes,
            "layout_conversions": sum(1 for t in plan.transfers if t.layout_conversion),
            "placement_greedy_cycles": round(plan.placement.greedy_cycles),
            "placement_optimal_cycles": round(plan.placement.optimal_cycles),
            "placement_moved_kernels": plan.placement.moved,
            "compile_estimated_cycles": sum(k.cost.total_cycles for k in kernels)
            + sum(t.cycles for t in plan.transfers),
            **curve_metrics,
        })

    @classmethod
    def compile_input(cls, inputs: StageInputs, cfg: DictConfig
                      ) -> tuple[onnx.ModelProto, Graph, str, str | None]:
        """The model compile reads, its graph, the applied quant scheme and the precision
        its float nodes compute in."""
        path = latest_model(inputs)
        model = onnx.load(path)
        quantized = any(n.op_type in QDQ_OPS for n in model.graph.node)
        scheme = cls._applied_scheme(inputs, cfg, quantized)
        # float layers of npuflow's own int8 run in the precision it keeps them in; those
        # of a file kept as it is run as the file states (fp32)
        float_precision = ("fp32" if scheme == "as_is" else cfg.quant.float_precision) \
            if quantized else None
        llm = llm_source.recorded(inputs)
        wanted = (cfg.compile.llm.prompt_tokens, cfg.compile.llm.new_tokens)
        if llm is not None and wanted != retarget.contexts(llm):
            model = retarget.at_contexts(llm, inputs.get("quantize"), scheme, cfg.quant,
                                         *wanted)
            return model, from_onnx(model), scheme, float_precision
        return model, _graph(path, model), scheme, float_precision

    @staticmethod
    def _applied_scheme(inputs: StageInputs, cfg: DictConfig, quantized: bool) -> str:
        """The scheme the quantize stage applied (``auto`` resolves there), else the
        configured one; without a quantize stage an ``auto`` model is as it came."""
        quantize = inputs.get("quantize")
        if quantize is not None and (quantize / "accuracy.json").is_file():
            return str(json.loads((quantize / "accuracy.json").read_text())["scheme"])
        if cfg.quant.scheme == "auto":
            return "as_is" if quantized else "none"
        return str(cfg.quant.scheme)

    @staticmethod
    def _precision_curve(inputs: StageInputs, cfg: DictConfig, profile, out_dir: Path) -> dict:
        """compile/auto_curve.json (+ .png): automatic mixed precision's accepted points,
        costed on this hardware (pipeline/compiler/precision_curve.py)."""
        quantize = inputs.get("quantize")
        if quantize is None or not (quantize / "auto_curve.json").is_file():
            return {}
        upstream = {k: v for k, v in inputs.items() if k != "quantize"}
        points = precision_curve.cost_points(
            json.loads((quantize / "auto_curve.json").read_text()), latest_model(upstream),
            quantize / "calibration.json", cfg.quant, cfg.compile, profile)
        accuracy = json.loads((quantize / "accuracy.json").read_text())
        objective = accuracy.get("eval_objective") or "output_cosine"
        write_json(out_dir / "auto_curve.json", points)
        precision_curve.plot(points, objective, accuracy.get(f"{objective}_float"),
                             out_dir / "auto_curve.png")
        first, last = points[0], points[-1]
        log.info("quant.auto on %s: plain int8 %.3f ms, %s %.4f -> %.3f ms, %.4f with %d float "
                 "layers (%+.1f%% latency)", profile.name, first["latency_ms"], objective,
                 first[objective], last["latency_ms"], last[objective], last["float_layers"],
                 100 * (last["latency_ms"] / first["latency_ms"] - 1))
        return {"auto_int8_latency_ms": first["latency_ms"],
                "auto_latency_cost_ms": last["latency_ms"] - first["latency_ms"]}
