"""Console entry points. They install a signal handler before the heavy imports (Hydra,
onnx, onnxruntime take seconds), so that Ctrl-C while npuflow starts is one line and exit
130 rather than an import traceback; the commands then install their own
(``pipeline.running.interrupt``)."""

from __future__ import annotations

import os
import signal
import sys
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
    if sys.argv[1:2] == ["describe"]:
        from pipeline.describe import main as describe

        describe(sys.argv[2:])
        return
    from pipeline.reports.figures import figure_server

    with figure_server() if _draws_figures(sys.argv[1:]) else nullcontext():
        from pipeline.cli import main as run

        run()


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
