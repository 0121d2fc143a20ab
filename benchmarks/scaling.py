"""Compile + simulate wall time against graph size: the zoo, real graphs, synthetic chains.

    python benchmarks/scaling.py [--quick]

Every model runs through the real pipeline (quant=fp16, so the graph runs on the default
rk3588 profile's NPU; cache off); per-stage wall times come from the run's
``timings.json``. Series: the zoo; onnx's own test-data models; OCR/detector models shipped
in PyPI wheels (fetched by ``wild_models.py``'s ``fetch``); synthetic residual chains of
growing depth (8-channel 3x3 conv + BN + ReLU + add per block, so the size of the graph
grows and not its arithmetic). Writes results/scaling.{md,json,png}; the slope of a
log-log fit over the chains is the empirical complexity of compile and of simulate.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
from _common import RESULTS, quick_flag, run_npuflow, write_result
from wild_models import fetch

from pipeline.artifacts import save_figure
from pipeline.zoo.builder import GraphBuilder

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ZOO = ["digits_mlp", "bert_encoder", "resnet18", "mobilenet_v2", "resnet50", "yolov5s"]
REAL = ["squeezenet", "shufflenet", "resnet50", "inception_v2", "densenet121"]
WHEEL_MODELS = ("ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx", "common_det.onnx")
CHAIN_BLOCKS = [25, 100, 400, 1600]


def residual_chain(blocks: int, path: Path) -> None:
    g = GraphBuilder(f"chain_{blocks}", seed=0, opset=17)
    x = g.input("input", (1, 8, 16, 16))
    for _ in range(blocks):
        # a small BN gamma keeps 1,600 residual adds finite (each add grows the variance)
        x = g.add(x, g.relu(g.batchnorm(g.conv(x, 8, 3, 1), gamma_scale=0.002)))
    g.output(x)
    onnx.save(g.build(), path)


def measure(label: str, series: str, run_dir: Path, *overrides: str) -> dict:
    m = run_npuflow(run_dir, *overrides, "quant=fp16", "run.cache=false", "simulate.frames=1")
    t = json.loads((run_dir / "timings.json").read_text())
    row = {"model": label, "series": series, "nodes": m["model_nodes"],
           "nodes_after": m["nodes_after"], "kernels": m["kernels"],
           "optimize_s": t["optimize"], "compile_s": t["compile"], "simulate_s": t["simulate"],
           "pipeline_s": sum(t.values())}
    print(json.dumps(row), flush=True)
    return row


def cases(workdir: Path, quick: bool) -> list[tuple[str, str, list[str]]]:
    out = [(name, "zoo", [f"model={name}"]) for name in (ZOO[:3] if quick else ZOO)]
    out += [(f"light_{n}", "onnx test data", ["model=onnx",
                                              f"model.path={LIGHT / f'light_{n}.onnx'}"])
            for n in (REAL[:2] if quick else REAL)]
    if not quick:
        for label, path, shape in fetch():
            if path.name in WHEEL_MODELS:
                pin = [f"model.input_shape=[{','.join(map(str, shape))}]"] if shape else []
                out.append((label.split("/")[-1], "PyPI wheels",
                            ["model=onnx", f"model.path={path}", *pin]))
    for blocks in (CHAIN_BLOCKS[:2] if quick else CHAIN_BLOCKS):
        path = workdir / f"chain_{blocks}.onnx"
        residual_chain(blocks, path)
        out.append((f"chain_{blocks}", "synthetic chain", ["model=onnx", f"model.path={path}"]))
    return out


def slope(rows: list[dict], key: str) -> float:
    chain = [r for r in rows if r["series"] == "synthetic chain"]
    x = np.log([r["kernels"] for r in chain])
    y = np.log([max(r[key], 1e-4) for r in chain])
    return float(np.polyfit(x, y, 1)[0])


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = {"zoo": "o", "onnx test data": "s", "PyPI wheels": "D", "synthetic chain": "^"}
    for series, marker in markers.items():
        pts = [r for r in rows if r["series"] == series]
        if not pts:
            continue
        k = [r["kernels"] for r in pts]
        ax.scatter(k, [r["compile_s"] for r in pts], marker=marker, color="tab:blue",
                   label=f"compile, {series}")
        ax.scatter(k, [r["simulate_s"] for r in pts], marker=marker, color="tab:orange",
                   label=f"simulate, {series}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("kernels in the plan (after optimize and fusion)")
    ax.set_ylabel("wall seconds (2-core machine)")
    ax.set_title("npuflow compile and simulate time vs graph size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_figure(fig, path)


def markdown(rows: list[dict]) -> str:
    lines = ["| model | series | ONNX nodes | after optimize | kernels | compile s | "
             "simulate s | optimize s | whole pipeline s |", "|---" * 9 + "|"]
    for r in sorted(rows, key=lambda r: (r["series"], r["kernels"])):
        lines.append(f"| {r['model']} | {r['series']} | {r['nodes']:,} | {r['nodes_after']:,} "
                     f"| {r['kernels']:,} | {r['compile_s']:.3f} | {r['simulate_s']:.3f} | "
                     f"{r['optimize_s']:.1f} | {r['pipeline_s']:.1f} |")
    worst = max(rows, key=lambda r: r["compile_s"] + r["simulate_s"])
    lines += ["", f"Log-log slope over the synthetic chains (time ~ kernels^slope): compile "
              f"{slope(rows, 'compile_s'):.2f}, simulate {slope(rows, 'simulate_s'):.2f}. "
              f"Largest compile + simulate: {worst['model']} ({worst['kernels']:,} kernels) "
              f"in {worst['compile_s'] + worst['simulate_s']:.2f} s. simulate includes "
              "drawing its three PNGs. optimize and quantize against graph size: "
              "`results/pipeline_speed.md`. Plot: `results/scaling.png`.", "",
              "![scaling](results/scaling.png)"]
    return "\n".join(lines)


def main() -> None:
    quick = quick_flag(__doc__, "a few small models")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(label, series, Path(tmp) / f"run{i}", *overrides)
                for i, (label, series, overrides) in enumerate(cases(Path(tmp), quick))]
    plot(rows, RESULTS / "scaling.png")
    text = markdown(rows)
    write_result("scaling", text, rows)
    print(text)


if __name__ == "__main__":
    main()
