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
import subprocess
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
TIGHT = (1 / 1.25, 1.25)


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
    """A pair's run: a TFLite file as shipped (``tflite_file``: the very file a Vela figure
    is for, with its own quantization), an ONNX file, or a zoo model."""
    if pair.get("tflite_file"):
        extra = ["model=tflite", f"model.path={MODELS / pair['tflite_file']}"]
    else:
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
        # a compiler's estimate counts its command stream, not the application's hand-over
        ours, ref, unit = metrics["cycles_excluding_io"], pair["cycles"], "cycles"
    else:
        ours, ref, unit = metrics["latency_ms"], pair["latency_ms"], "ms"
    return {**pair, "unit": unit, "reference": ref, "npuflow": ours, "ratio": ours / ref,
            "within": BAND[0] <= ours / ref <= BAND[1], "time": where_time_goes(run_dir),
            "cold_start_ms": metrics["cold_start_ms"], "fallback_ops": metrics["cpu_ops"]}


def _fmt(value: float, unit: str) -> str:
    return f"{value:,.0f} cycles" if unit == "cycles" else f"{value:.3f} ms"


def chip(row: dict) -> str:
    """The profile a pair runs on (its ``hardware=`` override)."""
    return next(o.split("=", 1)[1] for o in row["overrides"] if o.startswith("hardware="))


def headline(rows: list[dict]) -> str:
    """Check pairs only (``role: check``: never used to set or choose a profile value)."""
    checks = [r for r in rows if r["role"] == "check"]
    if not checks:
        return "No check pairs."
    within = sum(r["within"] for r in checks)
    tight = sum(TIGHT[0] <= r["ratio"] <= TIGHT[1] for r in checks)
    geo = math.exp(sum(math.log(r["ratio"]) for r in checks) / len(checks))
    boards = [r for r in checks if r["kind"] == "board"]
    return (f"Check pairs: {within} of {len(checks)} within 1.5x, {tight} within 1.25x, "
            f"geometric mean ratio {geo:.2f}; of them {len(boards)} measured on boards and "
            f"{len(checks) - len(boards)} vendor estimates (Vela). Fit pairs (used to set, "
            "choose or regress a profile value) are listed apart and are not evidence.")


def per_chip(rows: list[dict]) -> list[str]:
    lines = ["| chip | kind | check pairs | within 1.5x | within 1.25x | ratio range "
             "| geometric mean | fit pairs |", "|---|---|---|---|---|---|---|---|"]
    for key in sorted({(chip(r), r["kind"]) for r in rows}):
        group = [r for r in rows if (chip(r), r["kind"]) == key]
        checks = [r for r in group if r["role"] == "check"]
        fits = len(group) - len(checks)
        if not checks:
            lines.append(f"| {key[0]} | {key[1]} | 0 | - | - | - | - | {fits} |")
            continue
        ratios = [r["ratio"] for r in checks]
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(f"| {key[0]} | {key[1]} | {len(checks)} "
                     f"| {sum(r['within'] for r in checks)} "
                     f"| {sum(TIGHT[0] <= x <= TIGHT[1] for x in ratios)} "
                     f"| {min(ratios):.2f}-{max(ratios):.2f} | {geo:.2f} | {fits} |")
    return lines


def _table(rows: list[dict], extra: str, key: str) -> list[str]:
    """``extra``: the last column's title, filled from each row's ``key`` (why a fit pair
    is one; what a check pair's first comparison was seen before)."""
    head = ("| network | profile | published | source | npuflow | ratio | in band "
            f"| where npuflow's time goes | {extra} |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        cell = f" {r.get(key, '')} |"
        lines.append(
            f"| {r['network']} | {r['profile']} | {_fmt(r['reference'], r['unit'])} "
            f"| {r['source']} | {_fmt(r['npuflow'], r['unit'])} | {r['ratio']:.2f} "
            f"| {'yes' if r['within'] else '**no**'} | {r['time']} |{cell}")
    return lines


def markdown(rows: list[dict], sources: dict) -> str:
    lines = [headline(rows), "", *per_chip(rows), "", "### Check pairs", "",
             "A check pair whose first comparison was seen before a mechanism was written says "
             "so in its last column; it stays a check pair.", "",
             *_table([r for r in rows if r["role"] == "check"], "seen before", "seen"), "",
             "### Fit pairs (not evidence)", "",
             *_table([r for r in rows if r["role"] == "fit"], "used for", "fit_because"), "",
             "Ratio = npuflow / published. Sources:", ""]
    lines += [f"- **{key}**: {text}" for key, text in sources.items()]
    lines += ["", "What each published figure is: "]
    lines += [f"- {r['network']} / {r['profile']}: {r['published']}" for r in rows]
    return "\n".join(lines)


CONF = HERE.parent / "conf" / "hardware"
CONFIDENCE_HEAD = ("# How far npuflow has been from measurements of this chip: npuflow / measured "
                   "over its check pairs\n# (benchmarks/silicon/published.yaml), written by "
                   "benchmarks/silicon_agreement.py --write-confidence.\n")


def confidence_block(chip_rows: list[dict], commit: str) -> str:
    """A profile's ``confidence`` section from its check pairs (boards where it has any,
    else vendor estimates); an explicit empty one where it has none, so that a derived
    profile does not inherit its parent's."""
    checks = [r for r in chip_rows if r["role"] == "check"]
    boards = [r for r in checks if r["kind"] == "board"]
    used = boards or checks
    if not used:
        return (CONFIDENCE_HEAD + "confidence: {pairs: 0, based_on: \"no check pair of this "
                "chip yet\"}\n")
    ratios = [r["ratio"] for r in used]
    kind = used[0]["kind"]
    sources = sorted({r["source"] for r in used})
    return (CONFIDENCE_HEAD + "confidence:\n"
            f"  ratio_low: {min(ratios):.3f}\n  ratio_high: {max(ratios):.3f}\n"
            f"  pairs: {len(used)}\n  kind: {kind}\n"
            f"  based_on: \"{len(used)} check pairs ({', '.join(sources)}): "
            f"{', '.join(sorted({r['network'].split()[0] for r in used}))}; "
            f"silicon_agreement at {commit}\"\n")


def write_confidence(rows: list[dict], commit: str) -> list[str]:
    """Rewrite the ``confidence`` section (the file's last) of every shipped profile."""
    written = []
    for path in sorted(CONF.glob("*.yaml")):
        chip_rows = [r for r in rows if chip(r) == path.stem]
        text = path.read_text()
        start = text.find(CONFIDENCE_HEAD)
        if start < 0:
            start = text.find("\nconfidence:")
            start = len(text) if start < 0 else start + 1
        body = text[:start].rstrip("\n") + "\n\n"
        path.write_text(body + confidence_block(chip_rows, commit))
        written.append(path.stem)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="pairs whose network or "
                        "profile contains one of these strings")
    parser.add_argument("--write-confidence", action="store_true",
                        help="write each profile's confidence section from its check pairs "
                        "(all pairs must run: not with --only)")
    args = parser.parse_args()
    if args.write_confidence and args.only:
        parser.error("--write-confidence needs every pair: drop --only")
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
    if args.write_confidence:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                                capture_output=True, text=True).stdout.strip()
        print("confidence written:", ", ".join(write_confidence(rows, commit)))
    print(text)
    checks = [r for r in rows if r["role"] == "check"]
    print(json.dumps({"check_within": sum(r["within"] for r in checks),
                      "check_pairs": len(checks), "fit_pairs": len(rows) - len(checks)}))


if __name__ == "__main__":
    main()
