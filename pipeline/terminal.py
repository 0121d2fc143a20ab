"""The one rich console that stages print their tables to. A sweep job silences it: a
multirun prints one line per job, not every stage's table (``pipeline.cli``)."""

from __future__ import annotations

from rich.console import Console

CONSOLE = Console()


def set_quiet(quiet: bool) -> None:
    CONSOLE.quiet = quiet
