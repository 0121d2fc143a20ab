"""Shared helpers: compose configs through Hydra's API and run the real CLI."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import onnx
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from pipeline import cli
from pipeline.schema import register_configs

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
ONNX_LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

register_configs()


def compose_config(*overrides: str, config_dir: Path | None = None) -> DictConfig:
    extra = [f"hydra.searchpath=[file://{config_dir}]"] if config_dir else []
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("config", overrides=[*extra, *overrides], return_hydra_config=False)


def run_cli(*args: str, cwd: Path = REPO, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    if env and "HYDRA_FULL_ERROR" in env:
        full_env["HYDRA_FULL_ERROR"] = env["HYDRA_FULL_ERROR"]
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=600)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.fixture
def light_model():
    def path(name: str) -> Path:
        return ONNX_LIGHT / f"light_{name}.onnx"
    return path


def run_inprocess(*args: str, main: Callable[[], None] | None = None
                  ) -> tuple[int, list[str], str]:
    """A CLI entry point (default: ``npuflow``) run in this process with ``args`` as its
    argv, Hydra composing afresh each time: exit code, non-empty stderr lines, stdout."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["npuflow", *args]
    code = 0
    try:
        with redirect_stdout(out), redirect_stderr(err):
            (main or cli.main)()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:  # an escaped traceback: what this table exists to catch
        code = 1
        err.write(traceback.format_exc())
    finally:
        sys.argv = saved
    return code, [line for line in err.getvalue().splitlines() if line.strip()], out.getvalue()
