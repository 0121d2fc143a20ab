"""Quantization on trained networks and labelled data: PaddleOCR's direction classifier and
PP-OCRv4 recogniser (rapidocr-onnxruntime's wheel) on seeded rendered text lines.

    python benchmarks/quant_trained.py [--quick]

Per network: fp32, fp16, int8 with minmax / entropy / percentile calibration, per-tensor
and per-channel weights, and automatic mixed precision (int8 minmax per-channel, target
0.5 points of fp32); accuracy from onnxruntime with the shipped metrics (top-1; CTC line
and character accuracy), latency and energy on two profiles. Writes results/quant_trained
.md / .json and the accuracy x latency Pareto plot results/quant_trained.png. ``--quick``:
fewer lines and the int8 minmax cases only.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from _common import RESULTS, machine, quick_flag, run_npuflow, write_result

from pipeline.datasets import text_lines

HARDWARE = ("rk3588", "edge_tpu")
PAD = ("data.resize_mode=pad", "data.mean=[0.5,0.5,0.5]", "data.std=[0.5,0.5,0.5]")
NETWORKS = {  # name: (task, data overrides, eval group)
    "ppocr_cls": ("cls", ("data=image_folder",), "eval=top_k"),
    "ppocr_rec": ("rec", ("data=image_list",), "eval=ctc"),
}
AMP = ("quant=int8", "quant.auto.enabled=true", "quant.auto.target.max_drop=0.5")


def cases(quick: bool) -> list[tuple[str, tuple[str, ...]]]:
    out = [("fp32", ("quant=none",)), ("fp16", ("quant=fp16",))]
    methods = ("minmax",) if quick else ("minmax", "entropy", "percentile")
    out += [(f"int8 {m} {'per-channel' if pc else 'per-tensor'}",
             ("quant=int8", f"quant.calibration.method={m}",
              f"quant.per_channel={str(pc).lower()}"))
            for m in methods for pc in (False, True)]
    return [*out, ("int8 + auto mixed precision", AMP)]


def run_case(root: Path, cache: Path, net: str, data: Path, hw: str, label: str,
             overrides: tuple[str, ...], index: int) -> dict:
    _, data_overrides, eval_group = NETWORKS[net]
    run_dir = root / f"{net}-{hw}-{index}"
    metrics = run_npuflow(run_dir, f"model={net}", *data_overrides, f"data.path={data}", *PAD,
                          eval_group, f"hardware={hw}", *overrides, f"run.cache_dir={cache}",
                          "data.calibration_size=64", "data.eval_size=500")
    acc = json.loads((run_dir / "quantize" / "accuracy.json").read_text())
    row = {"network": net, "hardware": hw, "case": label, "objective": acc["eval_objective"],
           "accuracy": metrics["accuracy"], "accuracy_float": metrics["accuracy_float"],
           "latency_ms": metrics["latency_ms"], "energy_mj": metrics["energy_mj"],
           "cpu_ops": metrics["cpu_ops"], "float_layers": metrics.get("quant_float_layers", 0),
           "eval_samples": acc["eval_samples"]}
    for extra in ("char_accuracy", "accuracy_top1"):
        if extra in metrics:
            row[extra] = metrics[extra]
    if "auto" in acc:
        curve = json.loads((run_dir / "compile" / "auto_curve.json").read_text())
        row["auto"] = {**acc["auto"], "int8_accuracy": curve[0][acc["eval_objective"]],
                       "int8_latency_ms": curve[0]["latency_ms"],
                       "curve": [{k: p[k] for k in ("float_layers", "candidate", "latency_ms",
                                                    acc["eval_objective"])} for p in curve]}
    return row


def pareto(rows: list[dict]) -> list[bool]:
    return [not any(o["latency_ms"] <= r["latency_ms"] and o["accuracy"] >= r["accuracy"]
                    and (o["latency_ms"], o["accuracy"]) != (r["latency_ms"], r["accuracy"])
                    for o in rows) for r in rows]


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["network"], r["hardware"]) for r in rows})
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 4), squeeze=False)
    for ax, (net, hw) in zip(axes[0], groups, strict=True):
        sub = [r for r in rows if (r["network"], r["hardware"]) == (net, hw)]
        front = pareto(sub)
        for r, on in zip(sub, front, strict=True):
            ax.scatter(r["latency_ms"], 100 * r["accuracy"], color="#1f77b4" if on else "#999",
                       zorder=3)
            ax.annotate(r["case"].replace("int8 ", "").replace(" mixed precision", ""),
                        (r["latency_ms"], 100 * r["accuracy"]), fontsize=6,
                        textcoords="offset points", xytext=(3, 3))
        pts = sorted((r["latency_ms"], 100 * r["accuracy"]) for r, on in zip(sub, front,
                                                                             strict=True) if on)
        ax.plot(*zip(*pts, strict=True), color="#1f77b4", linewidth=1)
        ax.set_xscale("log")
        ax.set_title(f"{net} on {hw}", fontsize=9)
        ax.set_xlabel("latency (ms, log)")
        ax.set_ylabel(f"{sub[0]['objective']} (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def table(rows: list[dict]) -> list[str]:
    lines = ["| network | hardware | case | accuracy | fp32 | latency ms | energy mJ | float "
             "layers | CPU ops | Pareto |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r, on in zip(rows, _fronts(rows), strict=True):
        lines.append(f"| {r['network']} | {r['hardware']} | {r['case']} | "
                     f"{100 * r['accuracy']:.2f}% | {100 * r['accuracy_float']:.2f}% | "
                     f"{r['latency_ms']:.3f} | {r['energy_mj']:.3f} | {r['float_layers']} | "
                     f"{r['cpu_ops']} | {'yes' if on else ''} |")
    return lines


def _fronts(rows: list[dict]) -> list[bool]:
    flags = {}
    for key in {(r["network"], r["hardware"]) for r in rows}:
        sub = [i for i, r in enumerate(rows) if (r["network"], r["hardware"]) == key]
        flags.update(zip(sub, pareto([rows[i] for i in sub]), strict=True))
    return [flags[i] for i in range(len(rows))]


def main() -> None:
    quick = quick_flag(__doc__, "150 lines per network, int8 minmax only")
    count = 150 if quick else 400
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root, cache = Path(tmp), Path(tmp) / "cache"
        for net, (task, _, _) in NETWORKS.items():
            data = text_lines.write(task, root / f"lines-{task}", count, seed=0)
            for hw in HARDWARE:
                for i, (label, overrides) in enumerate(cases(quick)):
                    rows.append(run_case(root, cache, net, data, hw, label, overrides, i))
                    r = rows[-1]
                    print(f"{net} {hw} {label}: {100 * r['accuracy']:.2f}% "
                          f"{r['latency_ms']:.3f} ms", flush=True)
    RESULTS.mkdir(exist_ok=True)
    plot(rows, RESULTS / "quant_trained.png")
    lines = [f"Rendered text lines (`pipeline/datasets/text_lines.py`, seed 0, {count} per "
             f"network: 64 calibrate, the rest evaluate), {machine()}. Accuracy: top-1 for the "
             "classifier, CTC line accuracy for the recogniser (`eval=ctc`). Latency and "
             "energy: npuflow on each profile.", "", *table(rows), "",
             "![accuracy x latency](results/quant_trained.png)", ""]
    for r in rows:
        if "auto" in r:
            a = r["auto"]
            lines.append(
                f"- {r['network']} on {r['hardware']}: plain int8 {100 * a['int8_accuracy']:.2f}% "
                f"at {a['int8_latency_ms']:.3f} ms -> {100 * r['accuracy']:.2f}% at "
                f"{r['latency_ms']:.3f} ms with {len(a['float_layers'])} float layers "
                f"({', '.join(a['float_layers']) or 'none'}); {a['stop']}; {a['trials']} trials; "
                f"fp32 {100 * r['accuracy_float']:.2f}%.")
    write_result("quant_trained", "\n".join(lines), rows)


if __name__ == "__main__":
    main()
