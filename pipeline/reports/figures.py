"""A run's figures drawn side by side, one forked process per core.

Why: the figures of a run (simulate's timeline, roofline and layers; a sweep's Pareto plot
and its picked jobs' plots) are independent, and each is 0.1-0.6 s of matplotlib in one
thread; the GIL rules out threads. Forked after pyplot is imported (~0.5 s a process would
otherwise pay again), workers draw them at once: on two cores a run's three simulate plots
take about the time of the largest. A figure is drawn by the same code either way, so its
bytes are the same. Sequential where forking cannot help or is not allowed: one figure,
one core, no ``fork`` (Windows), or inside a daemonic process (a pool launcher's worker,
which may not have children).

A command-line run draws them in its figure server (``figure_server``: matplotlib imported
beside the run's own work), which draws them here.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pipeline.artifacts import pyplot

if TYPE_CHECKING:
    from pipeline.reports.figure_server import FigureServer

Figure = Callable[[], None]

_FIGURES: list[Figure] = []  # set in the parent before the fork, read by index in workers
_SERVER: list[FigureServer] = []  # the figure server this process started, while it runs


def _draw(index: int) -> None:
    _FIGURES[index]()


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


@contextmanager
def serving_figures() -> Iterator[None]:
    """Within this block, this process's figures are drawn by a figure server forked at
    its start (``figure_server.start``); it is closed at the end."""
    from pipeline.reports import figure_server as server

    started = server.start(draw_local) if cores() >= 2 else None
    if started is not None:
        _SERVER.append(started)
    try:
        yield
    finally:
        if started is not None:
            _SERVER.remove(started)
            started.close()


def draw_all(figures: Sequence[Figure]) -> None:
    """Call every figure-drawing function: in this process's figure server when it has one
    and they pickle, else here (``draw_local``); a failure is raised here."""
    if not figures:
        return
    server = _SERVER[-1] if _SERVER else None
    if server is not None and server.owner == os.getpid() and server.draw(figures):
        return
    draw_local(figures)


def draw_local(figures: Sequence[Figure]) -> None:
    """Call every figure-drawing function, on up to one forked worker per core; a worker's
    exception is raised here."""
    if not figures:
        return
    workers = min(len(figures), cores())
    if workers < 2 or multiprocessing.current_process().daemon \
            or "fork" not in multiprocessing.get_all_start_methods():
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
