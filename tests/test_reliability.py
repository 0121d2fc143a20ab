"""Faults and concurrency: a killed run leaves nothing trusted; parallel equals sequential."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import REPO, run_cli

SMALL = ["model=digits_mlp", "data=digits"]


def test_parallel_jobs_sharing_the_cache_match_sequential_ones(tmp_path):
    grid = [*SMALL, "hardware=rk3588,edge_tpu", "quant=int8,fp16"]
    seq = run_cli("-m", *grid, f"hydra.sweep.dir={tmp_path / 'seq'}",
                  f"run.cache_dir={tmp_path / 'c1'}")
    par = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *grid,
                  f"hydra.sweep.dir={tmp_path / 'par'}", f"run.cache_dir={tmp_path / 'c2'}")
    assert seq.returncode == 0 and par.returncode == 0, seq.stderr + par.stderr
    for job in range(4):
        a = (tmp_path / "seq" / str(job) / "metrics.json").read_bytes()
        b = (tmp_path / "par" / str(job) / "metrics.json").read_bytes()
        assert a == b, f"job {job} differs"


def test_a_run_killed_mid_stage_leaves_nothing_a_rerun_trusts(tmp_path):
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    args = [sys.executable, "-m", "pipeline", "model=mobilenet_v2",
            f"hydra.run.dir={run_dir}", f"run.cache_dir={cache}"]
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list(run_dir.glob(".quantize.tmp-*")):
        time.sleep(0.05)
    time.sleep(0.5)  # well inside calibration
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "quantize").exists() and not (run_dir / "metrics.json").exists()
    entries = list((cache / "stages" / "quantize").glob("*"))
    assert not any((e / "COMPLETE").is_file() for e in entries if e.is_dir())

    rerun = run_cli("model=mobilenet_v2", f"hydra.run.dir={run_dir}", "run.replace=true",
                    f"run.cache_dir={cache}")
    assert rerun.returncode == 0, rerun.stderr
    assert not list(run_dir.glob(".*.tmp-*"))
    status = json.loads((run_dir / "cache.json").read_text())
    assert status["export"] == "hit" and status["quantize"] == "miss"
    clean = run_cli("model=mobilenet_v2", f"hydra.run.dir={tmp_path / 'clean'}",
                    "run.cache=false")
    assert clean.returncode == 0
    assert (run_dir / "metrics.json").read_bytes() == \
        (tmp_path / "clean" / "metrics.json").read_bytes()
