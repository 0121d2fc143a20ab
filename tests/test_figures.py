"""Figures drawn side by side (pipeline.reports.figures): the bytes of sequential drawing,
a worker's error raised in the caller, no children from a daemonic process."""

from __future__ import annotations

import multiprocessing
import os
from functools import partial
from pathlib import Path

import pytest

from pipeline.artifacts import pyplot, save_figure
from pipeline.reports import figures


def _bars(path: Path, values: tuple[int, ...]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(len(values)), values)
    ax.set_title("bars")
    save_figure(fig, path)


def _fails() -> None:
    raise ValueError("a figure's own error")


def _jobs(folder: Path) -> list:
    return [partial(_bars, folder / f"{i}.png", tuple(range(1, i + 3))) for i in range(3)]


def test_side_by_side_gives_the_bytes_of_one_after_another(tmp_path, monkeypatch):
    (tmp_path / "seq").mkdir()
    (tmp_path / "par").mkdir()
    monkeypatch.setattr(figures, "_cores", lambda: 1)
    figures.draw_all(_jobs(tmp_path / "seq"))
    monkeypatch.setattr(figures, "_cores", lambda: 2)
    parent = os.getpid()
    figures.draw_all([*_jobs(tmp_path / "par"),
                      partial(_record_pid, tmp_path / "pids")])
    for i in range(3):
        assert (tmp_path / "par" / f"{i}.png").read_bytes() == \
            (tmp_path / "seq" / f"{i}.png").read_bytes()
    assert int((tmp_path / "pids").read_text()) != parent  # really drawn in a worker


def _record_pid(path: Path) -> None:
    path.write_text(str(os.getpid()))


def test_a_worker_s_error_is_raised_in_the_caller(monkeypatch, tmp_path):
    monkeypatch.setattr(figures, "_cores", lambda: 2)
    with pytest.raises(ValueError, match="a figure's own error"):
        figures.draw_all([*_jobs(tmp_path), _fails])


def _in_daemon(folder: str, queue: multiprocessing.Queue) -> None:
    figures._cores = lambda: 2  # type: ignore[assignment]
    figures.draw_all([partial(_record_pid, Path(folder) / "pid")])
    figures.draw_all([partial(_record_pid, Path(folder) / "a"),
                      partial(_record_pid, Path(folder) / "b")])
    queue.put(os.getpid())


def test_a_daemonic_process_draws_its_figures_itself(tmp_path):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_in_daemon, args=(str(tmp_path), queue), daemon=True)
    child.start()
    pid = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0
    assert {(tmp_path / n).read_text() for n in ("pid", "a", "b")} == {str(pid)}
