"""The one rich console that stages print their tables to. A sweep job silences it: a
multirun prints one line per job, not every stage's table (``pipeline.cli``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import Progress

CONSOLE = Console()


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
def task(description: str, total: int) -> Iterator[Callable[..., None]]:
    """A progress bar for a stage's loop; yields ``step(description=None)`` which advances
    it by one. Inside a run it is a line under the stage bar, alone it is its own display."""
    own = None if _ACTIVE else Progress(transient=True, console=CONSOLE)
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
