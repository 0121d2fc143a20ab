"""Figures drawn side by side (pipeline.reports.figures): the bytes of sequential drawing,
a worker's error raised in the caller, no children from a daemonic process."""

from __future__ import annotations

import errno
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
    monkeypatch.setattr(figures, "cores", lambda: 1)
    figures.draw_all(_jobs(tmp_path / "seq"))
    monkeypatch.setattr(figures, "cores", lambda: 2)
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
    monkeypatch.setattr(figures, "cores", lambda: 2)
    with pytest.raises(ValueError, match="a figure's own error"):
        figures.draw_all([*_jobs(tmp_path), _fails])


def _in_daemon(folder: str, queue: multiprocessing.Queue) -> None:
    figures.cores = lambda: 2  # type: ignore[assignment]
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


def _unthreaded(monkeypatch) -> None:
    """pytest-xdist's worker runs threads, where the CLI's process has none; the server's
    check is for the CLI's case, so the test lifts it."""
    from pipeline.reports import figure_server

    monkeypatch.setattr(figure_server.threading, "active_count", lambda: 1)
    monkeypatch.setattr(figures, "cores", lambda: 2)


def test_the_figure_server_draws_the_caller_s_bytes_in_its_own_process(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "served").mkdir()
    monkeypatch.setattr(figures, "cores", lambda: 1)
    figures.draw_all(_jobs(tmp_path / "here"))
    _unthreaded(monkeypatch)
    with figures.serving_figures():
        server = figures._SERVER[-1]
        figures.draw_all([*_jobs(tmp_path / "served"), partial(_record_pid, tmp_path / "pid")])
        figures.draw_all([partial(_record_pid, tmp_path / "pid2")])  # a second request
    for i in range(3):
        assert (tmp_path / "served" / f"{i}.png").read_bytes() == \
            (tmp_path / "here" / f"{i}.png").read_bytes()
    drawn_by = {int((tmp_path / n).read_text()) for n in ("pid", "pid2")}
    assert os.getpid() not in drawn_by
    assert server.pid in drawn_by or len(drawn_by) == 2  # the server, or its pool's workers
    assert not figures._SERVER  # closed with its block
    _, status = os.waitpid(server.pid, 0)  # it exits once its pipe is closed
    assert os.waitstatus_to_exitcode(status) == 0


class _Unrebuildable(Exception):
    def __init__(self, text: str, *, where: str) -> None:
        super().__init__(text)
        self.where = where


def _disk_full() -> None:
    raise OSError(errno.ENOSPC, "No space left on device", "/run/simulate/timeline.png")


def _fails_oddly() -> None:
    raise _Unrebuildable("an odd error", where="here")


def test_a_figure_that_fails_in_the_server_fails_the_caller_with_its_error(monkeypatch):
    _unthreaded(monkeypatch)
    with figures.serving_figures():
        with pytest.raises(ValueError, match="a figure's own error"):
            figures.draw_all([_fails])
        with pytest.raises(OSError) as full:  # the runner's one line for a full disk
            figures.draw_all([_disk_full])
        assert full.value.errno == errno.ENOSPC
        assert full.value.filename == "/run/simulate/timeline.png"
        with pytest.raises(RuntimeError, match="_Unrebuildable: an odd error"):
            figures.draw_all([_fails_oddly])  # what does not travel, told as its traceback


def test_a_figure_that_does_not_pickle_is_drawn_by_the_caller(tmp_path, monkeypatch):
    _unthreaded(monkeypatch)
    with figures.serving_figures():
        figures.draw_all([lambda: _record_pid(tmp_path / "pid")])
    assert int((tmp_path / "pid").read_text()) == os.getpid()


def test_a_threaded_process_starts_no_figure_server(monkeypatch):
    from pipeline.reports import figure_server

    monkeypatch.setattr(figure_server.threading, "active_count", lambda: 2)
    monkeypatch.setattr(figures, "cores", lambda: 2)
    assert figure_server.start(figures.draw_local) is None
