"""Sweeps and DVC, driven for real: Hydra multirun with joblib, the stage cache, and dvc
repro / exp run / queued grids in a temporary git repository."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.dvc_stage import default_params
from tests.conftest import REPO, compose_config, run_cli

BIN = str(Path(sys.executable).parent)
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
ENV.pop("HYDRA_FULL_ERROR", None)
SMALL = ["model=digits_mlp", "data=digits"]


def test_committed_params_yaml_is_the_default_composition():
    assert (REPO / "params.yaml").read_text() == default_params()


def test_multirun_3x2x2_with_joblib_runs_each_upstream_config_once(tmp_path):
    proc = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *SMALL,
                   "hardware=rk3588,edge_tpu,nvdla_full", "compile.placement=greedy,optimal",
                   "quant=int8,fp16", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                   f"run.cache_dir={tmp_path / 'cache'}")
    assert proc.returncode == 0, proc.stderr
    jobs = sorted((tmp_path / "sweep").glob("[0-9]*"))
    assert len(jobs) == 12
    counts = collections.Counter()
    for job in jobs:
        for stage, status in json.loads((job / "cache.json").read_text()).items():
            counts[stage, status] += 1
    assert counts["export", "miss"] == 1 and counts["optimize", "miss"] == 1
    assert counts["quantize", "miss"] == 2  # int8 and fp16
    assert counts["compile", "miss"] == 12 and counts["simulate", "miss"] == 12
    summary = (tmp_path / "sweep" / "summary.csv").read_text().splitlines()
    assert len(summary) == 13 and "pareto" in summary[0]
    assert "hardware=" in (tmp_path / "sweep" / "summary.md").read_text()
    assert (tmp_path / "sweep" / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert "best" in proc.stdout


def test_cached_and_fresh_runs_give_identical_metrics(tmp_path):
    for name in ("a", "b"):
        proc = run_cli(*SMALL, f"hydra.run.dir={tmp_path / name}",
                       f"run.cache_dir={tmp_path / 'cache'}")
        assert proc.returncode == 0, proc.stderr
    assert set(json.loads((tmp_path / "b" / "cache.json").read_text()).values()) == {"hit"}
    assert (tmp_path / "a" / "metrics.json").read_bytes() == \
        (tmp_path / "b" / "metrics.json").read_bytes()
    info = subprocess.run([sys.executable, "-m", "pipeline.cache", "info",
                           str(tmp_path / "cache")], capture_output=True, text=True)
    assert "export" in info.stdout and "1 entries" in info.stdout
    subprocess.run([sys.executable, "-m", "pipeline.cache", "clear", str(tmp_path / "cache")],
                   check=True, capture_output=True)
    assert not (tmp_path / "cache" / "stages").exists()


def _sh(*args: str, cwd: Path) -> str:
    proc = subprocess.run(list(args), cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"{args}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture
def dvc_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("conf", "pipeline", "ops", "hardware", "hydra_plugins", ".dvc"):
        shutil.copytree(REPO / name, repo / name,
                        ignore=shutil.ignore_patterns("__pycache__", "tmp", "cache"))
    for name in ("dvc.yaml", ".dvcignore"):
        shutil.copy(REPO / name, repo / name)
    cfg = compose_config(*SMALL)
    (repo / "params.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    _sh("git", "init", "-q", cwd=repo)
    _sh("git", "add", "-A", cwd=repo)
    _sh("git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init", cwd=repo)
    return repo


def test_dvc_repro_exp_run_and_a_queued_grid(dvc_repo):
    first = _sh("dvc", "repro", cwd=dvc_repo)
    for stage in ("export", "optimize", "quantize", "compile", "simulate"):
        assert f"Running stage '{stage}'" in first
    assert "up to date" in _sh("dvc", "repro", cwd=dvc_repo)
    _sh("git", "add", "-A", cwd=dvc_repo)
    _sh("git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "run",
        cwd=dvc_repo)

    out = _sh("dvc", "exp", "run", *[f"-S{s}" for s in SMALL], "-Shardware=edge_tpu",
              cwd=dvc_repo)
    ran = {s for s in ("export", "optimize", "quantize", "compile", "simulate")
           if f"Running stage '{s}'" in out}
    assert ran == {"compile", "simulate"}
    assert "Stage 'export' didn't change, skipping" in out

    _sh("dvc", "exp", "run", "--queue", *[f"-S{s}" for s in SMALL],
        "-Shardware=rk3588,edge_tpu", "-Squant=int8,fp16", cwd=dvc_repo)
    _sh("dvc", "queue", "start", "-j", "2", cwd=dvc_repo)  # two at a time
    deadline = time.time() + 600
    while time.time() < deadline:
        status = _sh("dvc", "queue", "status", cwd=dvc_repo)
        if "Queued" not in status and "Running" not in status:
            break
        time.sleep(3)
    assert status.count("Success") >= 4, status
    table = _sh("dvc", "exp", "show", "--csv", cwd=dvc_repo)
    header = table.splitlines()[0].split(",")
    assert "latency_ms" in header and "energy_mj" in header
    rows = [r for r in table.splitlines()[1:] if "branch_commit" in r]
    assert len(rows) >= 4
