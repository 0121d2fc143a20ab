"""Sweep throughput: points per minute and stage-cache hit rate of a real Hydra multirun.

    python benchmarks/sweep_throughput.py [--quick]

The grid is the README's tiling x precision sweep on mobilenet_v2 / rk3588 (4 tile_m x 2
tile_n x 3 quant = 24 points; --quick: 2 x 1 x 2 = 4). It runs three times through the CLI:
cold (empty stage cache, sequential launcher), warm (the same sweep again: every stage a
cache hit) and cold with the joblib launcher (2 workers sharing one cache). Hit rates come
from each job's ``cache.json``. Writes results/sweep_throughput.{md,json}.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import REPO, quick_flag, write_result

GRID = ["model=mobilenet_v2", "hardware=rk3588", "compile.tiling.mode=fixed",
        "compile.tiling.tile_m=16,32,64,128", "compile.tiling.tile_n=16,64",
        "quant=int8,fp16,none"]
QUICK = ["model=mobilenet_v2", "hardware=rk3588", "compile.tiling.mode=fixed",
         "compile.tiling.tile_m=16,64", "compile.tiling.tile_n=16", "quant=int8,fp16"]
STAGES = ("export", "optimize", "quantize", "compile", "simulate")


def sweep(label: str, grid: list[str], sweep_dir: Path, cache: Path, *launcher: str) -> dict:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeline", "-m", *grid, *launcher,
                    f"run.cache_dir={cache}", f"hydra.sweep.dir={sweep_dir}"], cwd=REPO,
                   check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    per_stage: dict[str, Counter] = {s: Counter() for s in STAGES}
    jobs = [d for d in sweep_dir.iterdir() if (d / "cache.json").is_file()]
    for job in jobs:
        for stage, status in json.loads((job / "cache.json").read_text()).items():
            per_stage[stage][status] += 1
    lookups = sum(sum(c.values()) for c in per_stage.values())
    hits = sum(c["hit"] for c in per_stage.values())
    row = {"sweep": label, "points": len(jobs), "seconds": seconds,
           "points_per_minute": 60 * len(jobs) / seconds, "hit_rate": hits / lookups,
           "computed": {s: per_stage[s]["miss"] for s in STAGES}}
    print(json.dumps(row), flush=True)
    return row


def markdown(rows: list[dict], grid: list[str]) -> str:
    lines = [f"Grid: `python -m pipeline -m {' '.join(grid)}`", "",
             "| sweep | points | wall s | points / min | stage-cache hit rate | "
             "computed (export / optimize / quantize / compile / simulate) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        computed = " / ".join(str(r["computed"][s]) for s in STAGES)
        lines.append(f"| {r['sweep']} | {r['points']} | {r['seconds']:.1f} | "
                     f"{r['points_per_minute']:.1f} | {100 * r['hit_rate']:.0f}% | {computed} |")
    lines += ["", "A cold sweep computes each upstream stage once per distinct upstream config "
              "(export and optimize once, quantize once per precision) and compile/simulate "
              "per point, except where clipped tiles give an identical plan (a hit). Each "
              "point also pays Hydra's job setup and the three PNGs of simulate."]
    return "\n".join(lines)


def main() -> None:
    quick = quick_flag(__doc__, "4 points")
    grid = QUICK if quick else GRID
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = [sweep("cold, sequential", grid, root / "cold", root / "cache"),
                sweep("warm, sequential (same sweep again)", grid, root / "warm",
                      root / "cache"),
                sweep("cold, joblib 2 workers", grid, root / "joblib", root / "cache2",
                      "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")]
    text = markdown(rows, grid)
    write_result("sweep_throughput", text, rows)
    print(text)


if __name__ == "__main__":
    main()
