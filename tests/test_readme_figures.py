"""The README's example figures are what its commands print today (docs/readme_figures.py),
and a figure that drifts is named with both values."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "docs" / "readme_figures.py"


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=900)


def test_the_readme_figures_are_current_and_a_drifted_one_is_named(tmp_path):
    readme = (REPO / "README.md").read_text()
    cycles = re.search(r"\| cycles_total \| ([\d,]+) \(", readme)
    assert cycles, "the TFLite example's table lost its cycles_total row"
    copy = tmp_path / "README.md"
    copy.write_text(readme[:cycles.start(1)] + "1" + readme[cycles.end(1):])
    work = tmp_path / "runs"

    check = _script("--readme", str(copy), "--work", str(work))
    assert check.returncode == 1, check.stdout + check.stderr
    drifted = [line for line in check.stdout.splitlines() if "README says" in line]
    assert drifted == [f"README.md: tflite: cycles_total: README says 1, the example gives "
                       f"{cycles.group(1)}"], check.stdout  # and nothing else has drifted

    write = _script("--readme", str(copy), "--work", str(work), "--write")
    assert write.returncode == 0, write.stdout + write.stderr
    assert copy.read_text() == readme  # regenerated, the altered copy is the README again


def test_an_example_the_readme_no_longer_shows_is_a_problem_not_a_pass(tmp_path):
    readme = (REPO / "README.md").read_text()
    copy = tmp_path / "README.md"
    edited = readme.replace("simulate.sustained.ambient_c=25,45",
                            "simulate.sustained.ambient_c=25")
    copy.write_text(edited)
    proc = _script("--readme", str(copy), "--work", str(tmp_path / "runs"), "--write")
    assert proc.returncode == 1
    assert "power modes: the README no longer shows" in proc.stdout
    assert copy.read_text() == edited  # nothing written over a README the script cannot map
    assert not (tmp_path / "runs").exists()  # and nothing run for it
