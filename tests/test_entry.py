"""The console commands' quick ending (pipeline.entry._ending_quickly): the command's exit
code, its buffered output and the exit handlers survive skipping the interpreter's
teardown; a profiler gets its ordinary exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

PROGRAM = """
import atexit, sys
from pipeline.entry import _ending_quickly
atexit.register(lambda: print("exit handler ran"))
def command():
    print("buffered line", end="")  # no newline: still in stdout's buffer at the end
    {ending}
_ending_quickly(command)
print("not reached")
"""


def _run(ending: str, *before: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *before, "-c", PROGRAM.format(ending=ending)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("ending", "code"), [("pass", 0), ("sys.exit(2)", 2),
                                              ("sys.exit(None)", 0)])
def test_the_exit_code_output_and_exit_handlers_survive(ending, code):
    proc = _run(ending)
    assert proc.returncode == code
    assert proc.stdout == "buffered lineexit handler ran\n"  # flushed, handler ran, then out


def test_an_exit_with_a_message_prints_it_and_exits_1():
    proc = _run("sys.exit('npuflow: something')")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "npuflow: something"


def test_a_bug_keeps_its_traceback():
    proc = _run("raise KeyError('a bug')")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "KeyError: 'a bug'" in proc.stderr
    assert "not reached" not in proc.stdout


def test_under_a_profiler_the_process_ends_the_ordinary_way():
    proc = subprocess.run([sys.executable, "-c", "import cProfile, sys; cProfile.run("
                           + repr(PROGRAM.format(ending="pass")) + ")"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "function calls" in proc.stdout  # cProfile printed its table: not cut short
    assert proc.stdout.endswith("exit handler ran\n")
