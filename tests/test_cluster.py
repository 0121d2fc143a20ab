"""Sweeps on a real distributed engine: a Ray cluster of two nodes on localhost
(hydra-ray-launcher), submitit's local executor (the Slurm launcher's code path) and the
pool launcher; every point's metrics must equal the sequential run of the same grid."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

BIN = Path(sys.executable).parent
GRID = ["model=digits_mlp", "data=digits", "hardware=rk3588,edge_tpu", "quant=int8,fp16"]


def _metrics_by_point(sweep: Path) -> dict[str, bytes]:
    """metrics.json bytes per point, keyed by the point's overrides (not by job number,
    which a launcher may assign in another order)."""
    out = {}
    for job in sweep.glob("[0-9]*"):
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        points = [line[2:] for line in overrides.splitlines() if line.startswith("- ")]
        key = " ".join(sorted(p for p in points if p.startswith(("hardware=", "quant="))))
        out[key] = (job / "metrics.json").read_bytes()
    return out


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    root = tmp_path_factory.mktemp("sequential")
    proc = run_cli("-m", *GRID, f"hydra.sweep.dir={root / 'sweep'}",
                   f"run.cache_dir={root / 'cache'}")
    assert proc.returncode == 0, proc.stderr
    points = _metrics_by_point(root / "sweep")
    assert len(points) == 4
    return points


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([str(BIN / "ray"), *args], env=env, capture_output=True, text=True,
                          timeout=180)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A head and a second node, both on this machine, as `ray start` makes them."""
    if shutil.which("ray", path=str(BIN)) is None:
        pytest.fail("ray is not installed: pip install 'npuflow[cluster]' (in the test extra)")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    head = _ray("start", "--head", f"--port={port}", "--num-cpus=1",
                "--include-dashboard=false", "--disable-usage-stats")
    assert head.returncode == 0, head.stderr
    try:
        node = _ray("start", f"--address={address}", "--num-cpus=1")
        assert node.returncode == 0, node.stderr
        deadline = time.time() + 60
        while time.time() < deadline:  # the second node registers asynchronously
            status = _ray("status", f"--address={address}").stdout
            if status.count("node_") >= 2:
                break
            time.sleep(2)
        assert status.count("node_") >= 2, status
        yield address
    finally:
        _ray("stop", "--force")


def test_a_sweep_on_a_two_node_ray_cluster_equals_the_sequential_run(ray_cluster, sequential,
                                                                     tmp_path):
    proc = run_cli("-m", *GRID, "hydra/launcher=ray_cluster",
                   f"hydra.launcher.ray.init.address={ray_cluster}",
                   f"hydra.sweep.dir={tmp_path / 'sweep'}",
                   f"run.cache_dir={tmp_path / 'shared-cache'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    port = ray_cluster.rsplit(":", 1)[1]
    assert re.search(rf"Connecting to existing Ray cluster at address: \S+:{port}\b",
                     proc.stdout + proc.stderr)
    assert _metrics_by_point(tmp_path / "sweep") == sequential
    assert (tmp_path / "sweep" / "summary.csv").is_file()


def test_a_sweep_through_submitit_equals_the_sequential_run(sequential, tmp_path):
    proc = run_cli("-m", *GRID, "hydra/launcher=submitit_local",
                   "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                   f"run.cache_dir={tmp_path / 'cache'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _metrics_by_point(tmp_path / "sweep") == sequential


def test_a_sweep_on_the_pool_launcher_equals_the_sequential_run(sequential, tmp_path):
    proc = run_cli("-m", *GRID, "hydra/launcher=pool", "hydra.launcher.n_jobs=2",
                   f"hydra.sweep.dir={tmp_path / 'sweep'}", f"run.cache_dir={tmp_path / 'c'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _metrics_by_point(tmp_path / "sweep") == sequential
