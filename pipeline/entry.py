"""Console entry points. They install a signal handler before the heavy imports (Hydra,
onnx, onnxruntime take seconds), so that Ctrl-C while npuflow starts is one line and exit
130 rather than an import traceback; the commands then install their own
(``pipeline.running.interrupt``)."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def _starting(signum: int, frame: FrameType | None) -> None:
    os.write(2, f"npuflow: interrupted by {signal.Signals(signum).name} while starting; "
                "nothing was written\n".encode())
    os._exit(128 + signum)


def _guard() -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _starting)


def _user_modules_importable() -> None:
    """``model.module=my_pkg.nets:build`` and ``_target_=my_metrics.f1`` name modules of the
    user's project: the console script finds them from the current folder, as
    ``python -m pipeline`` does."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def main() -> None:
    """``npuflow`` and ``python -m pipeline`` (``npuflow describe ...``: pipeline.describe)."""
    _guard()
    _user_modules_importable()
    if sys.argv[1:2] == ["describe"]:
        from pipeline.describe import main as describe

        describe(sys.argv[2:])
        return
    from pipeline.cli import main as run

    run()


def calibrate() -> None:
    """``npuflow-calibrate``."""
    _guard()
    _user_modules_importable()
    from pipeline.calibrate.cli import main as run

    run()
