"""Console entry points. They install a signal handler before the heavy imports (Hydra,
onnx, onnxruntime take seconds), so that Ctrl-C while npuflow starts is one line and exit
130 rather than an import traceback; the commands then install their own
(``pipeline.running.interrupt``)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import nullcontext
from types import FrameType


def _starting(signum: int, frame: FrameType | None) -> None:
    os.write(2, f"npuflow: interrupted by {signal.Signals(signum).name} while starting; "
                "nothing was written\n".encode())
    os._exit(128 + signum)


def _guard() -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _starting)


def _keep_large_buffers() -> None:
    """Serve allocations up to 1 GiB from glibc's heap instead of a fresh ``mmap`` each.
    A run moves a model's weights through protobuf, numpy and onnxruntime several times;
    with glibc's default (a fresh mapping for anything over its dynamic threshold, returned
    on free) every copy faults its pages in again. On light_vgg19's 575 MB that was most of
    the optimize stage, in the kernel (13.3 -> 9.6 s, the same peak memory), and 16% of a
    4B language model's run. Only the command line's own process: the in-process API
    leaves its host's allocator alone."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, macOS): nothing to tune
        return
    m_mmap_threshold = -3  # malloc.h
    libc.mallopt(m_mmap_threshold, ctypes.c_int(1 << 30))


def _user_modules_importable() -> None:
    """``model.module=my_pkg.nets:build`` and ``_target_=my_metrics.f1`` name modules of the
    user's project: the console script finds them from the current folder, as
    ``python -m pipeline`` does."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def main() -> None:
    """``npuflow`` and ``python -m pipeline`` (``npuflow describe ...``: pipeline.describe)."""
    _guard()
    _keep_large_buffers()
    _user_modules_importable()
    _ending_quickly(_command)


def _command() -> None:
    if sys.argv[1:2] == ["describe"]:
        from pipeline.describe import main as describe

        describe(sys.argv[2:])
        return
    from pipeline.reports.figures import serving_figures

    with serving_figures() if _draws_figures(sys.argv[1:]) else nullcontext():
        from pipeline.cli import main as run

        run()


def _ending_quickly(command: Callable[[], None]) -> None:
    """Run a console command, then end the process without the interpreter's teardown.

    Why: with onnx, onnxruntime, Hydra, onnxslim (and sympy) and matplotlib loaded,
    CPython's finalization (every module's objects freed one by one, C++ destructors) took
    ~0.25 s of a ~2.4 s cold run after its last line was printed. Everything a command
    writes is closed by then (artifacts are written atomically, in ``with`` blocks); the
    exit handlers (logging's flush, multiprocessing's joins) still run, then stdout and
    stderr are flushed and the process ends with the command's exit code. A bug's
    traceback, a thread still running, or a profiler or tracer (cProfile, pyinstrument,
    coverage: they write their results at the ordinary exit) takes the ordinary way out."""
    try:
        command()
        code: object = 0
    except SystemExit as stop:
        code = stop.code
    if threading.active_count() > 1 or sys.getprofile() or sys.gettrace():
        raise SystemExit(code)
    if code is not None and not isinstance(code, int):  # SystemExit("text"): as Python does
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe, a closed stream
            stream.flush()
    os._exit(code or 0)


# Hydra's options that print instead of running: no figures to draw
_PRINTING_FLAGS = frozenset({"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i",
                             "--shell-completion", "-sc", "--version"})


def _draws_figures(argv: list[str]) -> bool:
    """A run or a sweep: its figure server is forked now, before the heavy imports, so
    that matplotlib is imported on the second core while this one starts
    (``pipeline.reports.figure_server``)."""
    return not any(arg.split("=", 1)[0] in _PRINTING_FLAGS for arg in argv)


def calibrate() -> None:
    """``npuflow-calibrate``."""
    _guard()
    _keep_large_buffers()
    _user_modules_importable()
    from pipeline.calibrate.cli import main as run

    run()
