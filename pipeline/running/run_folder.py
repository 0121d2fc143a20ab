"""A run folder holds one run.

Hydra writes a run into ``hydra.run.dir`` whatever is there: a second run into a used folder
would leave the first run's later stages, metrics.json and report.html beside its own, and
its report would describe a model it never ran. So before Hydra writes anything (its
``on_run_start`` / ``on_multirun_start`` callbacks run before the folder is created), a
folder that holds anything is refused in one line, unless ``run.replace=true``: then the
earlier run's files are removed first, and only when everything there is something a run
writes: a folder holding anything else (a user's file) is refused either way. The folder is
claimed by creating Hydra's ``.hydra`` subfolder atomically, so two runs started into the
same folder at the same moment cannot both proceed. A run stopped by a user's mistake before any
stage wrote anything gives the folder back (``release``), so the corrected run can use it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pipeline.configuration import objective
from pipeline.errors import UserError, UserStop
from pipeline.running.registry import STAGE_NAMES

RUN_FILES = frozenset({"metrics.json", "report.html", "cache.json", "timings.json",
                       "point.json", "multirun.yaml", "summary.csv", "summary.md",
                       "pareto.png", "optimization_results.yaml"})


def _written_by_a_run(path: Path) -> bool:
    """What a run or a sweep writes: Hydra's ``.hydra`` and job log, npuflow's files, stage
    folders (each has a ``metrics.json``) and their temporary copies, numbered job
    folders."""
    name = path.name
    if path.is_symlink() or not (path.is_dir() or path.is_file()):
        return False
    if path.is_file():
        return name in RUN_FILES or name.endswith(".log")
    return (name == ".hydra" or name in STAGE_NAMES or (path / "metrics.json").is_file()
            or (name.startswith(".") and ".tmp-" in name)
            or (name.isdigit() and (path / ".hydra").is_dir()))


_claimed: tuple[Path, str | None] | None = None  # this process's last claim, for release


def claim(folder: Path, key: str, replace: bool, subdir: str | None) -> None:
    """Make ``folder`` this run's alone, or raise a UserError naming it."""
    global _claimed
    _claimed = None
    if folder.is_file():
        raise UserError(f"{key}: '{folder}' is a file, not a folder")
    entries = sorted(folder.iterdir()) if folder.is_dir() else []
    if entries:
        foreign = [p for p in entries if not _written_by_a_run(p)]
        if foreign:
            raise UserError(f"{key}: '{folder}' holds files no npuflow run wrote "
                            f"({_listing(foreign)}); a run needs a new or empty folder")
        if not replace:
            raise UserError(f"{key}: '{folder}' already holds a run ({_listing(entries)}); "
                            "a folder holds one run: choose another, or add "
                            "run.replace=true to replace it")
        for path in entries:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if subdir:
            (folder / subdir).mkdir()
        _claimed = (folder, subdir)
    except FileExistsError as exc:
        raise UserError(f"{key}: '{folder}' was taken by another run starting at the same "
                        "moment") from exc
    except OSError as exc:
        raise UserError(f"{key}: cannot create '{exc.filename or folder}': "
                        f"{exc.strerror or type(exc).__name__}") from exc


def release(folder: Path, subdir: str | None) -> None:
    """Give back a folder whose run stopped on a user's mistake before any stage wrote
    anything (a value refused at the door, a model file the export could not read, a
    sweep's job that did not compose): only Hydra's ``subdir``, its ``multirun.yaml`` and
    the log are there, and they would refuse the corrected run the user starts next.
    Nothing is removed when anything else is there; the folder itself stays (it may have
    been the user's)."""
    entries = list(folder.iterdir()) if folder.is_dir() else []
    if any(not ((subdir and p.name == subdir and p.is_dir()) or (p.is_file() and (
            p.name == "multirun.yaml" or p.name.endswith(".log")))) for p in entries):
        return
    for path in entries:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def release_claimed() -> None:
    """``release`` the folder this process last claimed, once."""
    global _claimed
    if _claimed is not None:
        release(*_claimed)
        _claimed = None


def _listing(paths: list[Path]) -> str:
    shown = ", ".join(p.name + ("/" if p.is_dir() else "") for p in paths[:5])
    return shown + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


class RunGuard(Callback):
    """Hydra callback (``conf/config.yaml``, listed first): what must hold before Hydra
    writes or launches anything: the run folder is this run's alone, and a sweep's
    objective is a metric the chain produces. Hydra turns a callback's exception into a
    warning and runs on, so a refusal travels as a :class:`UserStop`."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._guard(lambda: claim(Path(config.hydra.run.dir), "hydra.run.dir",
                                  bool(config.run.get("replace")), config.hydra.output_subdir))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._guard(lambda: objective.check(config))
        self._guard(lambda: claim(Path(config.hydra.sweep.dir), "hydra.sweep.dir",
                                  bool(config.run.get("replace")), None))

    @staticmethod
    def _guard(check: Callable[[], None]) -> None:
        try:
            check()
        except UserError as exc:
            raise UserStop(exc) from exc
