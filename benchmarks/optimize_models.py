"""Optimize on every zoo model and on onnx's own test-data models: nodes per pass, error.

    python benchmarks/optimize_models.py

Runs export + optimize (the default pass list) through the real stages and writes
results/optimize_models.md: per model, nodes before, after each pass of round 1, final
nodes, worst max-abs error against the exported model, and the optimize wall time.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import onnx
from _common import run_npuflow, write_result

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ZOO = ["mobilenet_v2", "resnet18", "resnet50", "yolov5s", "bert_encoder", "digits_mlp"]
REAL = ["resnet50", "squeezenet", "densenet121", "inception_v2", "shufflenet", "vgg19"]


def one(overrides: list[str], label: str, workdir: Path) -> str:
    start = time.perf_counter()
    run_npuflow(workdir / label, *overrides, "stages.order=[export,optimize]")
    seconds = time.perf_counter() - start
    report = json.loads((workdir / label / "optimize" / "report.json").read_text())
    first = [p for p in report["passes"] if p["round"] == 1]
    steps = " -> ".join(f"{p['pass']} {p['nodes_after']}" for p in first)
    worst = max(r["max_abs_error"] for r in report["rounds"])
    return (f"| {label} | {report['nodes_before']} | {steps} | {report['nodes_after']} | "
            f"{worst:.2e} | {seconds:.1f} |")


def main() -> None:
    lines = ["| model | nodes | round 1: nodes after each pass | final | max abs error | s |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in ZOO:
            lines.append(one([f"model={name}"], name, Path(tmp)))
            print(lines[-1], flush=True)
        for name in REAL:
            path = LIGHT / f"light_{name}.onnx"
            lines.append(one(["model=onnx", f"model.path={path}"], f"light_{name}", Path(tmp)))
            print(lines[-1], flush=True)
    write_result("optimize_models", "\n".join(lines))


if __name__ == "__main__":
    main()
