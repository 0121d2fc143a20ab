"""Optimize: ONNX -> ONNX through an ordered pass list, verified in onnxruntime.

Passes run in order, and the list repeats until a round changes no node count
(``optimize.max_rounds``); pipeline/optimizer/fixpoint.py runs the loop. Each round's model
is run on seeded inputs and compared with the exported model; when its max relative error
exceeds ``optimize.tolerance`` (and its max absolute error ``optimize.abs_tolerance``) the
round's passes are verified one by one and the first that broke the function is named (a
pass is not trusted, whatever it claims). A pass that cannot handle the graph (crashes, or
returns invalid or non-portable ONNX) is skipped on this model with a warning and listed in
``report.json`` and the metrics.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from pathlib import Path

import onnx
from omegaconf import DictConfig
from rich.table import Table

from pipeline import onnx_io
from pipeline.artifacts import write_json
from pipeline.optimizer.fixpoint import Round, Verifier, run_passes
from pipeline.optimizer.library_passes import PURE
from pipeline.optimizer.npu_passes import count_patterns, pad_channels
from pipeline.optimizer.registry import enabled, resolve
from pipeline.reports.terminal import CONSOLE
from pipeline.stages.base import Stage, StageInputs, StageResult, latest_model

log = logging.getLogger(__name__)


def _histogram_delta(before: onnx.ModelProto, after: onnx.ModelProto) -> dict[str, int]:
    a = Counter(n.op_type for n in before.graph.node)
    b = Counter(n.op_type for n in after.graph.node)
    return {op: b[op] - a[op] for op in sorted(set(a) | set(b)) if b[op] != a[op]}


def _report(rounds: list[Round]) -> tuple[list[dict], list[dict]]:
    passes = [{"round": s.round, "pass": s.name, "ran": s.ran,
               "nodes_before": len(s.before.graph.node), "nodes_after": len(s.after.graph.node),
               "op_delta": _histogram_delta(s.before, s.after) if s.changed else {},
               "seconds": round(s.seconds, 4)}
              for r in rounds for s in r.steps]
    verified = [{"round": r.number, "max_abs_error": r.error.max_abs,
                 "max_rel_error": r.error.max_rel, "verify_seconds": round(r.verify_seconds, 4),
                 "verified": r.verified}
                for r in rounds]
    return passes, verified


class OptimizeStage(Stage):
    name = "optimize"
    version = "3"  # report.json: per-round verification, whether a round had any to do
    config_keys = ("optimize",)
    produces = frozenset({
        "nodes_after", "nodes_before", "optimize_max_abs_error", "optimize_patterns",
        "optimize_skipped_passes",
    })

    def run(self, inputs: StageInputs, cfg: DictConfig, out_dir: Path) -> StageResult:
        opt = cfg.optimize
        source = latest_model(inputs)
        original = onnx.load(source)
        verifier = Verifier.of(original, cfg.run.seed, opt.tolerance, opt.abs_tolerance)
        passes = [(name, fn, isinstance(e, str) and name in PURE)
                  for i, e in enumerate(opt.passes) if enabled(e)
                  for name, fn in [resolve(e, i)]]
        if opt.pad_channels_to > 1:
            passes.append((f"pad_channels_to_{opt.pad_channels_to}",
                           functools.partial(pad_channels, multiple=opt.pad_channels_to), False))
        skipped: dict[str, str] = {}

        def on_skip(name: str, reason: str) -> None:
            if name not in skipped:
                log.warning("optimize pass '%s' skipped on this model: %s", name, reason)
            skipped[name] = reason

        model, rounds = run_passes(original, passes, opt.max_rounds, verifier, on_skip)
        report, verified = _report(rounds)
        worst = max((r.error.max_abs for r in rounds), default=0.0)
        if model is original and not onnx_io.external_data_files(source):
            onnx_io.copy_file(source, out_dir / "model.onnx")  # no pass changed it
        else:
            onnx_io.save_model(model, out_dir / "model.onnx")
        patterns = count_patterns(model)
        write_json(out_dir / "report.json", {"passes": report, "rounds": verified,
                                             "skipped": skipped, "patterns": patterns,
                                             "nodes_before": len(original.graph.node),
                                             "nodes_after": len(model.graph.node)})
        self._print(report, verified, len(original.graph.node), len(model.graph.node))
        return StageResult({"nodes_before": len(original.graph.node),
                            "nodes_after": len(model.graph.node),
                            "optimize_max_abs_error": worst,
                            "optimize_skipped_passes": sorted(skipped),
                            "optimize_patterns": patterns})

    @staticmethod
    def _print(report: list[dict], verified: list[dict], before: int, after: int) -> None:
        if CONSOLE.quiet:  # a sweep job
            return
        table = Table(title=f"optimize: {before} -> {after} nodes")
        for col in ("round", "pass", "nodes", "op changes", "s"):  # names never cut: the
            table.add_column(col, justify="left" if col in ("pass", "op changes") else "right",
                             no_wrap=col != "op changes", overflow="fold")  # changes fold
        errors = {r["round"]: r for r in verified}
        for i, r in enumerate(report):
            delta = ", ".join(f"{op} {d:+d}" for op, d in r["op_delta"].items())
            timing = f"{r['seconds']:.2f}" if r["ran"] else "at its fixed point"
            table.add_row(str(r["round"]), r["pass"], f"{r['nodes_before']} -> {r['nodes_after']}",
                          delta[:60] or "-", timing)
            last = i + 1 == len(report) or report[i + 1]["round"] != r["round"]
            if last:
                v = errors[r["round"]]
                result = f"max abs error {v['max_abs_error']:.2e}" if v["verified"] \
                    else "unchanged: nothing to run"
                table.add_row("", "[dim]verified[/dim]", "", f"[dim]{result}[/dim]",
                              f"{v['verify_seconds']:.2f}")
        CONSOLE.print(table)
