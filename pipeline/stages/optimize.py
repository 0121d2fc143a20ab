"""Optimize: ONNX -> ONNX through an ordered pass list, each pass verified in onnxruntime.

Passes run in order, and the list repeats until a round changes no node count
(``optimize.max_rounds``). After every pass the model is run on seeded inputs and compared
with the exported model; a pass whose max relative error exceeds ``optimize.tolerance``
(and whose max absolute error exceeds ``optimize.abs_tolerance``) is an error naming the
pass (the pass is not trusted, whatever it claims). A pass that cannot handle the graph
(crashes, or returns invalid or non-portable ONNX) is skipped on this model with a warning
and listed in ``report.json`` and the metrics. A pass that returns the model unchanged
(protobuf equality) is neither checked nor run again: its error is the verified error of
the model it was given, so the report is bit-identical and a no-op pass costs a copy.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import onnx
from omegaconf import DictConfig
from rich.table import Table

from pipeline import onnx_io
from pipeline.artifacts import write_json
from pipeline.errors import PassNotApplicable, UserError
from pipeline.optimizer.npu_passes import count_patterns, pad_channels
from pipeline.optimizer.registry import enabled, resolve
from pipeline.optimizer.verify import Difference, compare, reference_outputs
from pipeline.stages.base import Stage, StageInputs, StageResult, latest_model
from pipeline.terminal import CONSOLE

log = logging.getLogger(__name__)


def _histogram_delta(before: onnx.ModelProto, after: onnx.ModelProto) -> dict[str, int]:
    a = Counter(n.op_type for n in before.graph.node)
    b = Counter(n.op_type for n in after.graph.node)
    return {op: b[op] - a[op] for op in sorted(set(a) | set(b)) if b[op] != a[op]}


def _apply(name: str, fn: Callable[[onnx.ModelProto], onnx.ModelProto],
           model: onnx.ModelProto) -> onnx.ModelProto:
    """One pass on a copy of the model, its output checked; a pass that crashes or returns
    an invalid model is not applicable to this graph (a config mistake stays a UserError)."""
    try:
        out = fn(copy.deepcopy(model))
    except (UserError, PassNotApplicable):
        raise
    except Exception as exc:  # a library pass failing on this graph
        raise PassNotApplicable(f"{type(exc).__name__}: {str(exc)[:200]}") from exc
    if out == model:  # changed nothing: the input was already checked and verified
        return model
    try:
        onnx_io.check_model(out, f"pass '{name}' output")
    except UserError as exc:
        raise PassNotApplicable(str(exc)) from exc
    return out


class OptimizeStage(Stage):
    name = "optimize"
    version = "1"
    config_keys = ("optimize",)

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        opt = cfg.optimize
        original = onnx.load(latest_model(inputs))
        feeds, expected = reference_outputs(original, cfg.run.seed)
        passes = [resolve(e, i) for i, e in enumerate(opt.passes) if enabled(e)]
        if opt.pad_channels_to > 1:
            passes.append((f"pad_channels_to_{opt.pad_channels_to}",
                           functools.partial(pad_channels, multiple=opt.pad_channels_to)))
        model, report, worst = copy.deepcopy(original), [], 0.0
        # the model now in hand against the export's outputs: the export itself runs
        # bit-identically in the same session options, so it starts at zero
        current = Difference(0.0, 0.0)
        skipped: dict[str, str] = {}
        for round_no in range(1, opt.max_rounds + 1):
            start_nodes = len(model.graph.node)
            for name, fn in passes:
                before = model
                t0 = time.perf_counter()
                try:
                    model = _apply(name, fn, before)
                except PassNotApplicable as exc:
                    model = before
                    if name not in skipped:
                        log.warning("optimize pass '%s' skipped on this model: %s", name, exc)
                    skipped[name] = str(exc)
                    continue
                seconds = time.perf_counter() - t0
                if model is not before:  # an unchanged model keeps its verification
                    current = compare(model, feeds, expected, f"optimize pass '{name}'")
                diff = current
                if not diff.within(opt.tolerance, opt.abs_tolerance):
                    raise UserError(
                        f"optimize.passes: pass '{name}' changed the model's outputs "
                        f"(max relative error {diff.max_rel:.3g} > optimize.tolerance "
                        f"{opt.tolerance:g}, max abs error {diff.max_abs:.3g} > "
                        f"optimize.abs_tolerance {opt.abs_tolerance:g})")
                worst = max(worst, diff.max_abs)
                report.append({
                    "round": round_no, "pass": name, "nodes_before": len(before.graph.node),
                    "nodes_after": len(model.graph.node),
                    "op_delta": _histogram_delta(before, model), "seconds": round(seconds, 4),
                    "max_abs_error": diff.max_abs, "max_rel_error": diff.max_rel,
                })
            if len(model.graph.node) == start_nodes:
                break
        onnx_io.save_model(model, out_dir / "model.onnx")
        patterns = count_patterns(model)
        write_json(out_dir / "report.json", {"passes": report, "skipped": skipped,
                                             "patterns": patterns,
                                             "nodes_before": len(original.graph.node),
                                             "nodes_after": len(model.graph.node)})
        self._print(report, len(original.graph.node), len(model.graph.node))
        return StageResult({"nodes_before": len(original.graph.node),
                            "nodes_after": len(model.graph.node),
                            "optimize_max_abs_error": worst,
                            "optimize_skipped_passes": sorted(skipped),
                            "optimize_patterns": patterns})

    @staticmethod
    def _print(report: list[dict], before: int, after: int) -> None:
        table = Table(title=f"optimize: {before} -> {after} nodes")
        for col in ("round", "pass", "nodes", "op changes", "max abs err", "s"):
            table.add_column(col, justify="left" if col in ("pass", "op changes") else "right")
        for r in report:
            delta = ", ".join(f"{op} {d:+d}" for op, d in r["op_delta"].items())
            table.add_row(str(r["round"]), r["pass"], f"{r['nodes_before']} -> {r['nodes_after']}",
                          delta[:60] or "-", f"{r['max_abs_error']:.2e}", f"{r['seconds']:.2f}")
        CONSOLE.print(table)
