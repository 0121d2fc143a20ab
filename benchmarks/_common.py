"""What the benchmark scripts share: composing npuflow configs, running the real pipeline
in-process, reference tools in venvs of their own, and writing results/ files."""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
sys.path.insert(0, str(REPO))

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from pipeline.configuration.schema import register_configs  # noqa: E402
from pipeline.running.runner import run_pipeline  # noqa: E402

register_configs()


def npuflow_config(*overrides: str, config_dir: Path | None = None) -> DictConfig:
    """The config ``python -m pipeline [--config-dir DIR] overrides...`` would run."""
    extra = [f"hydra.searchpath=[file://{config_dir}]"] if config_dir else []
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=[*extra, *overrides])


def run_npuflow(run_dir: Path, *overrides: str, config_dir: Path | None = None
                ) -> dict[str, Any]:
    """Run the pipeline into ``run_dir``; returns metrics.json's content."""
    return run_pipeline(npuflow_config(*overrides, config_dir=config_dir), run_dir)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def ensure_venv(path: Path, packages: list[str]) -> Path:
    """A venv of a reference tool's own (its pins must not touch npuflow's); its python."""
    python = path / "bin" / "python"
    if not python.exists():
        print(f"creating {path} ({' '.join(packages)}) ...", file=sys.stderr)
        venv.create(path, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return python


def quick_flag(doc: str, smaller: str) -> bool:
    """Parse the one option most benchmarks take: ``--quick`` (``smaller`` says how)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=smaller)
    return parser.parse_args().quick


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_result(name: str, markdown: str, data: Any = None) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text(markdown.rstrip() + "\n")
    if data is not None:
        (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    return path
