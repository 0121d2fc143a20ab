"""Per-stage pipeline time against graph size, this checkout against an earlier commit.

    python benchmarks/pipeline_speed.py [--before REV] [--quick]

REV (default: the commit before the optimize/quantize speed work, 39d35ea) is checked out
into a temporary git worktree. Each case then runs as ``python -m pipeline`` from each
checkout in turn (before, after; same machine, same moment, cache off), and the stage
times come from each run's ``timings.json``; the ratio is per case, so a machine that
drifts moves both sides. Cases: synthetic residual chains of growing depth (the graph
grows, not its arithmetic; quant=fp16 as in scaling.py), real graphs from onnx's test
data (quant=fp16), and the zoo's resnet50 and mobilenet_v2 with the default int8
pipeline. The slope of a log-log fit of stage time over the chains' node counts is the
stage's empirical complexity. Every run's metrics.json must be equal on both sides
(a speed-up that changes a result is a bug): a difference is printed and fails the run.
Writes results/pipeline_speed.{md,json}.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from _common import REPO, quick_flag, write_result
from scaling import residual_chain

BEFORE = "39d35ea"
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
CHAINS = [25, 100, 400, 1600]
STAGES = ("export", "optimize", "quantize", "compile", "simulate")


def cases(workdir: Path, quick: bool) -> list[tuple[str, str, int, list[str]]]:
    """(label, series, ONNX nodes, overrides)."""
    out = []
    for blocks in CHAINS[:3] if quick else CHAINS:
        path = workdir / f"chain_{blocks}.onnx"
        residual_chain(blocks, path)
        out.append((f"chain_{blocks}", "synthetic chain", 4 * blocks,
                    ["model=onnx", f"model.path={path}", "quant=fp16"]))
    for name in ["squeezenet"] if quick else ["densenet121", "vgg19"]:
        path = LIGHT / f"light_{name}.onnx"
        out.append((f"light_{name}", "onnx test data", len(onnx.load(path).graph.node),
                    ["model=onnx", f"model.path={path}", "quant=fp16"]))
    for name in ["mobilenet_v2"] if quick else ["mobilenet_v2", "resnet50"]:
        out.append((name, "zoo, int8", 0, [f"model={name}"]))
    return out


def run(repo: Path, run_dir: Path, overrides: list[str]) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", *overrides, "run.cache=false",
                           f"hydra.run.dir={run_dir}"], cwd=repo, capture_output=True,
                          text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{repo}: {' '.join(overrides)} failed:\n{proc.stderr[-2000:]}")
    timings = json.loads((run_dir / "timings.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {"wall_s": wall, "pipeline_s": sum(timings.values()),
            **{f"{s}_s": timings.get(s, 0.0) for s in STAGES}, "metrics": metrics}


def slope(rows: list[dict], side: str, key: str) -> float:
    chain = [r for r in rows if r["series"] == "synthetic chain"]
    x = np.log([r["nodes"] for r in chain])
    y = np.log([max(r[side][key], 1e-3) for r in chain])
    return float(np.polyfit(x, y, 1)[0])


def markdown(rows: list[dict], before: str, after: str) -> str:
    lines = [f"Before: {before}; after: {after}. Seconds from each run's timings.json "
             "(stage work, start-up excluded); ratio = after / before, per case.", "",
             "| case | series | ONNX nodes | optimize before | optimize after | quantize before "
             "| quantize after | whole pipeline before | whole pipeline after | ratio |",
             "|---" * 10 + "|"]
    for r in rows:
        b, a = r["before"], r["after"]
        lines.append(f"| {r['case']} | {r['series']} | {r['nodes']:,} | {b['optimize_s']:.2f} "
                     f"| {a['optimize_s']:.2f} | {b['quantize_s']:.2f} | {a['quantize_s']:.2f} | "
                     f"{b['pipeline_s']:.2f} | {a['pipeline_s']:.2f} | "
                     f"{a['pipeline_s'] / b['pipeline_s']:.2f} |")
    lines += ["", "Log-log slope over the synthetic chains (stage time ~ nodes^slope):", "",
              "| stage | before | after |", "|---|---|---|"]
    for key in ("optimize_s", "quantize_s", "pipeline_s"):
        lines.append(f"| {key[:-2].replace('pipeline', 'whole pipeline')} | "
                     f"{slope(rows, 'before', key):.2f} | {slope(rows, 'after', key):.2f} |")
    return "\n".join(lines)


def main() -> None:
    quick = quick_flag(__doc__, "three chains, one real graph, mobilenet_v2")
    before_rev = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--before=")),
                      BEFORE)
    rev = lambda r: subprocess.run(["git", "rev-parse", "--short", r], cwd=REPO,  # noqa: E731
                                   capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        old = tmp_path / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old), before_rev],
                       cwd=REPO, check=True)
        try:
            rows = []
            for i, (label, series, nodes, overrides) in enumerate(cases(tmp_path, quick)):
                b = run(old, tmp_path / f"b{i}", overrides)
                a = run(REPO, tmp_path / f"a{i}", overrides)
                same = b.pop("metrics") == a.pop("metrics")
                nodes = nodes or json.loads((tmp_path / f"a{i}" / "metrics.json").read_text()
                                            )["model_nodes"]
                row = {"case": label, "series": series, "nodes": nodes, "before": b, "after": a,
                       "metrics_identical": same}
                print(json.dumps(row), flush=True)
                if not same:
                    raise SystemExit(f"{label}: metrics.json differs between {before_rev} "
                                     "and this checkout")
                rows.append(row)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO)
    text = markdown(rows, rev(before_rev), rev("HEAD") + " (+ working tree)")
    write_result("pipeline_speed", text, rows)
    print(text)


if __name__ == "__main__":
    main()
