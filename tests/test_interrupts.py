"""Ctrl-C and SIGTERM at several moments of a real run: one line, exit 130 / 143, no
traceback, no half-written stage folder, no cache entry for the stage that was cut; the
next run into the same cache is identical to a clean one.

Each moment is found by watching the run folder, not by sleeping: a stage writes into
``.<stage>.tmp-<pid>`` while it works, so signalling when that folder appears interrupts
that stage.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

ARGS = ("model=resnet18", "model.params.image_size=160", "simulate.plots=false")


def _start(run_dir: Path, cache: Path, *extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.Popen([sys.executable, "-m", "pipeline", *ARGS, *extra,
                             f"hydra.run.dir={run_dir}", f"run.cache_dir={cache}"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"finished before the moment: {proc.stderr.read()}"
        assert time.monotonic() < end, "the moment never came"
        time.sleep(0.01)


def _in_stage(run_dir: Path, stage: str):
    return lambda: any(run_dir.glob(f".{stage}.tmp-*"))


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> bytes:
    tmp = tmp_path_factory.mktemp("clean")
    proc = _start(tmp / "run", tmp / "cache")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    return (tmp / "run" / "metrics.json").read_bytes()


@pytest.mark.parametrize(("moment", "sig"), [
    ("starting", signal.SIGINT),
    ("optimize", signal.SIGINT),
    ("quantize", signal.SIGINT),
    ("quantize", signal.SIGTERM),
    ("export", signal.SIGTERM),
])
def test_an_interrupt_ends_the_run_cleanly(tmp_path, clean_run, moment, sig):
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    proc = _start(run_dir, cache)
    if moment == "starting":
        time.sleep(0.3)  # importing: Hydra has not composed yet
    else:
        _wait_for(proc, _in_stage(run_dir, moment))
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 5, "an interrupt must end the run within seconds"
    assert proc.returncode == 128 + sig, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"npuflow: interrupted by {signal.Signals(sig).name}"), lines
    if moment != "starting":
        assert f"in stage {moment}" in lines[0]
        assert not (run_dir / moment).exists() and not list(run_dir.glob(".*.tmp-*"))
        assert not (run_dir / "metrics.json").exists()
        stored = [p.name for p in cache.glob(f"stages/{moment}/*") if p.suffix != ".lock"]
        assert stored == []
    assert not list(cache.glob("stages/*/*.tmp-*"))
    again = _start(tmp_path / "again", cache)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-2000:]
    assert (tmp_path / "again" / "metrics.json").read_bytes() == clean_run
    statuses = json.loads((tmp_path / "again" / "cache.json").read_text())
    if moment == "quantize":
        assert statuses["optimize"] == "hit" and statuses["quantize"] == "miss"
