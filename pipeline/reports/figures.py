"""A run's figures drawn side by side, one forked process per core.

Why: the figures of a run (simulate's timeline, roofline and layers; a sweep's Pareto plot
and its picked jobs' plots) are independent, and each is 0.1-0.6 s of matplotlib in one
thread; the GIL rules out threads. Forked after pyplot is imported (~0.5 s a process would
otherwise pay again), workers draw them at once: on two cores a run's three simulate plots
take about the time of the largest. A figure is drawn by the same code either way, so its
bytes are the same. Sequential where forking cannot help or is not allowed: one figure,
one core, no ``fork`` (Windows), or inside a daemonic process (a pool launcher's worker,
which may not have children).

A run can also keep a figure server (``figure_server``): one process forked at its start
that imports pyplot on the spare core while the first stages run (0.7-1.2 s of a cold
run's own time otherwise: quantize's per-layer plot is the first figure), then draws every
batch ``draw_all`` sends it, forking its own workers as above. A batch crosses to it
pickled (each figure a module function and its arguments); one that does not pickle is
drawn here. ``draw_all`` waits for the batch either way, so a stage's folder is complete
when the stage returns.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from pipeline.artifacts import pyplot

Figure = Callable[[], None]

_FIGURES: list[Figure] = []  # set in the parent before the fork, read by index in workers
_SERVER: list[tuple[BaseProcess, Connection]] = []  # the run's figure server, if it has one


def _draw(index: int) -> None:
    _FIGURES[index]()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def _can_fork() -> bool:
    return not multiprocessing.current_process().daemon \
        and "fork" in multiprocessing.get_all_start_methods()


def draw_all(figures: Sequence[Figure]) -> None:
    """Call every figure-drawing function, on up to one forked worker per core (or in the
    run's figure server); a worker's exception is raised here."""
    if not figures:
        return
    if _SERVER and _served(list(figures)):
        return
    workers = min(len(figures), _cores())
    if workers < 2 or not _can_fork():
        for figure in figures:
            figure()
        return
    pyplot()
    _FIGURES[:] = figures
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            pool.map(_draw, range(len(figures)), chunksize=1)
            pool.close()  # let the workers exit on their own (see pool_launcher.launch)
            pool.join()
    finally:
        _FIGURES.clear()


def _served(figures: list[Figure]) -> bool:
    """Draw a batch in the figure server; False (nothing sent) when it does not pickle."""
    _, conn = _SERVER[0]
    try:
        data = pickle.dumps(figures)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    try:
        conn.send_bytes(data)
        error = conn.recv()
    except (EOFError, OSError):  # the server is gone (killed): draw here from now on
        _SERVER.clear()
        return False
    if error is not None:
        raise error
    return True


def _serve(conn: Connection) -> None:
    """The figure server's loop: pyplot first, then one reply per batch (None, or the
    exception drawing it raised) until the run goes away (or stops it)."""
    # the run stops it (SIGTERM, the default action: no handler the run installed, which
    # would raise the run's own interrupt here), not the terminal's Ctrl-C
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pyplot()
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            draw_all(pickle.loads(data))
            reply: BaseException | None = None
        except Exception as exc:
            reply = exc
        try:
            conn.send(reply)
        except (pickle.PicklingError, AttributeError, TypeError):
            conn.send(RuntimeError(f"{type(reply).__name__}: {reply}"))


@contextlib.contextmanager
def figure_server() -> Iterator[None]:
    """A figure server for the run inside the block, where forking is possible and there
    is a core to spare; stopped when the block ends, however it ends."""
    if _SERVER or _cores() < 2 or not _can_fork():
        yield
        return
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(theirs,), name="npuflow-figures")
    process.start()
    theirs.close()
    _SERVER.append((process, ours))
    try:
        yield
    finally:
        # every batch sent was drawn and answered (draw_all waits), so nothing is left to
        # finish: stopped at once, not after an import a run without figures never used
        _SERVER.clear()
        ours.close()
        process.terminate()
        process.join()
