"""The one rich console that stages print their tables to. A sweep job silences it: a
multirun prints one line per job, not every stage's table (``pipeline.cli``)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

CONSOLE = Console()
LOG = logging.getLogger("npuflow")
OWN_LOGGERS = frozenset({"npuflow", "pipeline", "hardware", "ops", "hydra", "__main__"})


class OwnRecords(logging.Filter):
    """The terminal's filter (conf/hydra/job_logging/npuflow.yaml): npuflow's records, and
    anyone's errors. Other libraries' info and warnings (onnxruntime's quantizer printing
    "Created a copy of bias", onnx_ir, Python warnings routed by ``logging.captureWarnings``)
    stay in the run's log file."""

    def filter(self, record: logging.LogRecord) -> bool:
        return (record.name.split(".")[0] in OWN_LOGGERS
                or record.levelno >= logging.ERROR)


def set_quiet(quiet: bool) -> None:
    CONSOLE.quiet = quiet


_ACTIVE: list[Progress] = []  # the runner's live progress display, when one is shown


@contextlib.contextmanager
def live_progress(progress: Progress) -> Iterator[Progress]:
    """Register the runner's display, so that a stage's long loop adds its own bar to it
    (rich allows one live display at a time)."""
    _ACTIVE.append(progress)
    try:
        yield progress
    finally:
        _ACTIVE.remove(progress)


@contextlib.contextmanager
def task(description: str, total: int | None) -> Iterator[Callable[..., None]]:
    """A progress bar with an ETA for a long loop; yields ``step(description=None)`` which
    advances it by one. Inside a run it is a line under the stage bar, alone it is its own
    display. Without a terminal (CI, a pipe, a log) rich draws nothing, so the loop logs one
    line per tenth of ``total`` instead (every 10 steps when the total is not known)."""
    if not CONSOLE.is_terminal:
        with logged(description, total) as step:
            yield step
        return
    own = None if _ACTIVE else Progress(*PROGRESS_COLUMNS, transient=True, console=CONSOLE)
    progress = _ACTIVE[-1] if _ACTIVE else own
    assert progress is not None
    with own if own is not None else contextlib.nullcontext():
        tid = progress.add_task(description, total=total, stage="")

        def step(text: str | None = None) -> None:
            progress.update(tid, advance=1, **({"description": text} if text else {}))

        try:
            yield step
        finally:
            progress.remove_task(tid)


@contextlib.contextmanager
def logged(description: str, total: int | None,
           emit: Callable[..., None] | None = None) -> Iterator[Callable[..., None]]:
    """``task``'s form without a terminal: ``emit(format, *args)`` (default: the npuflow
    log) once per tenth of ``total``, with the elapsed time and what is left."""
    emit = emit or LOG.info
    start = time.monotonic()
    done = 0
    reported = 0

    def step(text: str | None = None) -> None:
        nonlocal done, reported
        done += 1
        tenth = done * 10 // total if total else done // 10
        if tenth <= reported:
            return
        reported = tenth
        elapsed = time.monotonic() - start
        if total:
            left = elapsed * (total - done) / done
            emit("%s: %d/%d (%d%%), %.0f s elapsed, ~%.0f s left", text or description,
                 done, total, 100 * done // total, elapsed, left)
        else:
            emit("%s: %d done, %.0f s elapsed", text or description, done, elapsed)

    yield step


def progress_columns() -> tuple:
    """The runner's and the loops' columns: what, bar, which stage, elapsed, ETA."""
    return (TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.fields[stage]}"), TimeElapsedColumn(), TimeRemainingColumn())


PROGRESS_COLUMNS = progress_columns()
