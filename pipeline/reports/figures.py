"""A run's figures drawn side by side, one forked process per core.

Why: the figures of a run (simulate's timeline, roofline and layers; a sweep's Pareto plot
and its picked jobs' plots) are independent, and each is 0.1-0.6 s of matplotlib in one
thread; the GIL rules out threads. Forked after pyplot is imported (~0.5 s a process would
otherwise pay again), workers draw them at once: on two cores a run's three simulate plots
take about the time of the largest. A figure is drawn by the same code either way, so its
bytes are the same. Sequential where forking cannot help or is not allowed: one figure,
one core, no ``fork`` (Windows), or inside a daemonic process (a pool launcher's worker,
which may not have children).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence

from pipeline.artifacts import pyplot

Figure = Callable[[], None]

_FIGURES: list[Figure] = []  # set in the parent before the fork, read by index in workers


def _draw(index: int) -> None:
    _FIGURES[index]()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def draw_all(figures: Sequence[Figure]) -> None:
    """Call every figure-drawing function, on up to one forked worker per core; a worker's
    exception is raised here."""
    if not figures:
        return
    workers = min(len(figures), _cores())
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
