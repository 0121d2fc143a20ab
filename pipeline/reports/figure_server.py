"""A process, forked as a run starts, that imports matplotlib while the run composes its
config and runs its stages, then draws the run's figures.

Why: a cold run's figures were ~1 s of its ~2.8 s on two cores, and most of that was
importing matplotlib (~0.45 s) on the run's critical path, after the stage work had left
the second core idle. Forked before the heavy work, the server pays that import beside it;
when a stage asks for its figures, they are pickled to the server and drawn there (by
``figures.draw_local``, handed to ``start``: the same code, so the same bytes), and the
stage waits for them before its output is kept: a stage's folder is never stored without
its figures.

Only the process that started the server uses it (a pool launcher's workers, forked later,
draw their own); figures that do not pickle (a closure) are drawn in the caller. The server
reads its requests from a pipe and exits when the pipe closes: when the run ends, is
killed, or stops with an error. POSIX only; elsewhere nothing is forked.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import BinaryIO

Draw = Callable[[Sequence[Callable[[], None]]], None]

# what the server imports while it waits: pyplot and the modules whose functions draw a
# run's figures (unpickling a figure imports its module)
WARM_MODULES = ("pipeline.simulator.report", "pipeline.quantization.plots")


class FigureServer:
    """The parent's handle: ``draw`` sends figures and waits until they are on disk."""

    def __init__(self, requests: BinaryIO, replies: BinaryIO, pid: int) -> None:
        self._requests, self._replies, self.pid = requests, replies, pid
        self.owner = os.getpid()

    def draw(self, figures: Sequence[Callable[[], None]]) -> bool:
        """Draw ``figures`` in the server; False (nothing drawn) when they do not pickle or
        the server is gone, so the caller draws them itself."""
        try:
            request = pickle.dumps((os.getcwd(), list(figures)))
        except (pickle.PicklingError, AttributeError, TypeError, OSError):
            return False
        try:
            self._requests.write(len(request).to_bytes(8, "little") + request)
            self._requests.flush()
            failure = pickle.load(self._replies)
        except (BrokenPipeError, EOFError, OSError):
            return False
        if isinstance(failure, BaseException):  # the figure's own exception (a full disk
            raise failure  # stays an OSError, which the runner reports in one line)
        if failure is not None:
            raise RuntimeError(f"drawing a figure failed in the figure server:\n{failure}")
        return True

    def close(self) -> None:
        for pipe in (self._requests, self._replies):
            with contextlib.suppress(OSError):
                pipe.close()
        # not waited for: a server still importing exits on its own when it reads the
        # closed pipe, and a run that stops early should not wait for matplotlib
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, os.WNOHANG)


def _serve(requests: BinaryIO, replies: BinaryIO, draw: Draw) -> None:
    from pipeline.artifacts import pyplot

    # matplotlib's warnings and log records went to the run's log file in the run's own
    # process; the server was forked before that file was opened: they are dropped here,
    # not printed over the run's console
    logging.captureWarnings(True)
    logging.getLogger().handlers[:] = [logging.NullHandler()]
    pyplot()
    for module in WARM_MODULES:
        __import__(module)
    while True:
        size = requests.read(8)
        if len(size) < 8:
            return
        cwd, figures = pickle.loads(requests.read(int.from_bytes(size, "little")))
        failure: object = None
        try:
            os.chdir(cwd)
            draw(figures)
        except Exception as exc:  # told to the parent, which raises it
            failure = exc if _pickles(exc) else traceback.format_exc()
        pickle.dump(failure, replies)
        replies.flush()


def _pickles(exc: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # an exception class that does not rebuild from its arguments
        return False
    return True


def start(draw: Draw) -> FigureServer | None:
    """Fork the server, which calls ``draw`` on each request's figures; None where forking
    is not available or not safe."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return None  # a child forked from a threaded process may inherit a held lock
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the server: never returns into the parent's code
        code = 0
        try:
            os.close(request_write)
            os.close(reply_read)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run's Ctrl-C is the run's
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _serve(os.fdopen(request_read, "rb"), os.fdopen(reply_write, "wb"), draw)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(request_read)
    os.close(reply_write)
    return FigureServer(os.fdopen(request_write, "wb"), os.fdopen(reply_read, "rb"), pid)
