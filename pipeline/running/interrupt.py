"""Ctrl-C and SIGTERM end a run promptly and cleanly.

Python's default SIGINT handling raises KeyboardInterrupt wherever the main thread is: a
library that catches broad exceptions (a pass wrapper, a retry loop) can turn it into "this
pass does not apply" and a wrong result that is then cached, and a shell that starts a job
in the background leaves SIGINT ignored altogether. So the CLI installs its own handlers for
both signals (whatever was inherited): the first signal records itself and raises
:class:`Interrupted`, a ``BaseException`` that ``except Exception`` does not swallow; the
runner also calls :func:`check` before it keeps a stage's folder or stores a cache entry, so
an interrupt that some library did swallow still discards the stage. Cleanup (temporary
folders) runs as the exception unwinds; a second signal exits at once.

Exit codes follow the shell's convention, 128 + the signal number: 130 for SIGINT, 143 for
SIGTERM.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


class Interrupted(BaseException):
    """The run was stopped by a signal; ``exit_code`` is 128 + its number."""

    def __init__(self, signum: int) -> None:
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum
        self.where = ""  # the stage it stopped, set by the runner
        super().__init__(self.signal_name)


def _handle(signum: int, frame: FrameType | None) -> None:
    if _received:  # the user insists: cleanup is taking too long for them
        os.write(2, f"npuflow: {signal.Signals(signum).name} again: exiting now\n".encode())
        os._exit(128 + signum)
    _received.append(signum)
    raise Interrupted(signum)


def check() -> None:
    """Raise :class:`Interrupted` if a signal arrived (even if a library swallowed it)."""
    stopped = pending()
    if stopped is not None:
        raise stopped


def pending() -> Interrupted | None:
    """The interrupt a signal recorded, if one arrived: a library that catches everything
    (OmegaConf wraps what it meets into its own config errors) may have turned it into an
    exception of its own, which is then the interrupt and not that error."""
    return Interrupted(_received[0]) if _received else None


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Install the handlers for a CLI run and restore the previous ones after it (the
    in-process test runner calls the CLI many times in one process)."""
    _received.clear()
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, _handle)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _received.clear()


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ThreadPoolExecutor]:
    """A thread pool that, when the block raises (an interrupt above all), drops its queued
    work and does not wait for the running task: ``with ThreadPoolExecutor()`` would first
    finish every queued onnxruntime run."""
    pool = ThreadPoolExecutor(workers)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def exit_for(exc: Interrupted, program: str = "npuflow") -> None:
    """One line, then exit with the signal's code. Worker threads still inside a library
    call (onnxruntime evaluating in the background) are not waited for: the interpreter
    would join them at exit, which could take as long as the work itself."""
    where = f" in {exc.where}" if exc.where else ""
    print(f"{program}: interrupted by {exc.signal_name}{where}; the unfinished stage was "
          "discarded and nothing of it was cached", file=sys.stderr, flush=True)
    logging.shutdown()
    busy = [t for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if busy:
        sys.stdout.flush()
        os._exit(exc.exit_code)
    sys.exit(exc.exit_code)
