"""npuflow's whole-network latency against published figures from real boards and vendors'
estimators.

    python benchmarks/silicon_agreement.py [--only SUBSTRING ...]

The pairs are data (``benchmarks/silicon/published.yaml``: network, profile, published
figure, citation, the npuflow overrides that describe the same network on the same chip);
this script runs the real pipeline for each (batch 1, at the precision the figure was
measured in: int8 unless the row's overrides say otherwise) and writes
results/silicon_agreement.{md,json}: published figure, npuflow, ratio, and whether the
ratio is inside the 0.67-1.5 band. Calibration uses 4 synthetic samples and the per-layer
analysis is off: neither changes a cycle, both save minutes on VGG-16.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import onnx
from _common import HERE, read_csv, run_npuflow, write_result
from omegaconf import OmegaConf
from rich.progress import Progress

PUBLISHED = HERE / "silicon" / "published.yaml"
MODELS = HERE / "models"
ONNX_LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
FAST = ("data.calibration_size=4", "data.eval_size=4", "quant.analysis.layers=false",
        "run.cache=false")
BAND = (1 / 1.5, 1.5)


def load_pairs(only: list[str]) -> tuple[dict, list[dict]]:
    data = OmegaConf.to_container(OmegaConf.load(PUBLISHED), resolve=True)
    assert isinstance(data, dict)
    pairs = [p for p in data["pairs"]
             if not only or any(o in f"{p['network']} {p['profile']}" for o in only)]
    return data["sources"], pairs


def model_path(pair: dict) -> Path | None:
    """A pair's ONNX file: one shipped in benchmarks/models, or one of the architecture
    models in onnx's own test data (``onnx_light: densenet121``)."""
    if pair.get("model_file"):
        return MODELS / pair["model_file"]
    if pair.get("onnx_light"):
        return ONNX_LIGHT / f"light_{pair['onnx_light']}.onnx"
    return None


def overrides(pair: dict) -> list[str]:
    path = model_path(pair)
    extra = ["model=onnx", f"model.path={path}"] if path else []
    return [*extra, *pair["overrides"], *FAST]


def where_time_goes(run_dir: Path) -> str:
    """The largest shares of the simulated kernel time, by unit and bound."""
    shares: dict[str, int] = {}
    for row in read_csv(run_dir / "simulate" / "layers.csv"):
        key = f"{row['unit']} {row['bound']}" if row["target"] == "npu" else "cpu"
        shares[key] = shares.get(key, 0) + int(row["total_cycles"])
    total = sum(shares.values()) or 1
    top = sorted(shares.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in top)


def measure(pair: dict, run_dir: Path) -> dict:
    metrics = run_npuflow(run_dir, *overrides(pair))
    if "cycles" in pair:
        ours, ref, unit = metrics["cycles_total"], pair["cycles"], "cycles"
    else:
        ours, ref, unit = metrics["latency_ms"], pair["latency_ms"], "ms"
    return {**pair, "unit": unit, "reference": ref, "npuflow": ours, "ratio": ours / ref,
            "within": BAND[0] <= ours / ref <= BAND[1], "time": where_time_goes(run_dir),
            "cold_start_ms": metrics["cold_start_ms"], "fallback_ops": metrics["cpu_ops"]}


def _fmt(value: float, unit: str) -> str:
    return f"{value:,.0f} cycles" if unit == "cycles" else f"{value:.3f} ms"


def markdown(rows: list[dict], sources: dict) -> str:
    inside = sum(r["within"] for r in rows)
    worst = max(rows, key=lambda r: abs(math.log(r["ratio"])))
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    lines = [
        f"{inside} of {len(rows)} pairs within 1.5x (ratio 0.67-1.5); geometric mean ratio "
        f"{geo:.2f}; furthest: {worst['network']} on {worst['profile']} "
        f"({worst['ratio']:.2f}). Ratio = npuflow / published.", "",
        "| network | profile | published | source | npuflow | ratio | in band "
        "| where npuflow's time goes |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['network']} | {r['profile']} | {_fmt(r['reference'], r['unit'])} "
            f"| {r['source']} | {_fmt(r['npuflow'], r['unit'])} | {r['ratio']:.2f} "
            f"| {'yes' if r['within'] else '**no**'} | {r['time']} |")
    lines += ["", "Sources:", ""]
    lines += [f"- **{key}**: {text}" for key, text in sources.items()]
    lines += ["", "What each published figure is: "]
    lines += [f"- {r['network']} / {r['profile']}: {r['published']}" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="pairs whose network or "
                        "profile contains one of these strings")
    args = parser.parse_args()
    sources, pairs = load_pairs(args.only)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Progress() as progress:
        task = progress.add_task("published pairs", total=len(pairs))
        for i, pair in enumerate(pairs):
            progress.update(task, description=f"{pair['network']} on {pair['profile']}")
            rows.append(measure(pair, Path(tmp) / f"pair_{i}"))
            progress.advance(task)
    text = markdown(rows, sources)
    write_result("silicon_agreement", text, rows)
    print(text)
    print(json.dumps({"within": sum(r["within"] for r in rows), "pairs": len(rows)}))


if __name__ == "__main__":
    main()
