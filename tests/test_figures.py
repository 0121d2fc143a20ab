"""Figures drawn side by side (pipeline.reports.figures): the bytes of sequential drawing,
a worker's error raised in the caller, no children from a daemonic process, a run's figure
server."""

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


def _pid_of(path: Path) -> int:
    return int(path.read_text())


def test_a_figure_server_draws_the_bytes_drawn_here_and_stops_with_its_run(tmp_path,
                                                                          monkeypatch):
    """A run's figure server (forked at its start, pyplot imported there) draws what
    draw_all sends it, one figure or a batch, to the bytes drawn in this process; a figure
    that does not pickle is drawn here; the server is gone when the run's block ends, and
    also when the block raises."""
    (tmp_path / "here").mkdir()
    (tmp_path / "served").mkdir()
    monkeypatch.setattr(figures, "_cores", lambda: 1)
    figures.draw_all(_jobs(tmp_path / "here"))
    monkeypatch.setattr(figures, "_cores", lambda: 2)
    parent = os.getpid()
    with figures.figure_server():
        server = figures._SERVER[0][0]
        figures.draw_all([partial(_record_pid, tmp_path / "one")])
        figures.draw_all([*_jobs(tmp_path / "served"), partial(_record_pid, tmp_path / "many")])
        figures.draw_all([lambda: _record_pid(tmp_path / "local")])
    assert _pid_of(tmp_path / "one") not in (parent, 0)
    assert _pid_of(tmp_path / "many") != parent
    assert _pid_of(tmp_path / "local") == parent
    for i in range(3):
        assert (tmp_path / "served" / f"{i}.png").read_bytes() == \
            (tmp_path / "here" / f"{i}.png").read_bytes()
    assert not server.is_alive() and server.exitcode is not None and not figures._SERVER
    with pytest.raises(RuntimeError, match="the run failed"), figures.figure_server():
        server = figures._SERVER[0][0]
        raise RuntimeError("the run failed")
    assert not server.is_alive() and not figures._SERVER


def test_a_figure_server_raises_a_figure_s_error_and_a_dead_one_is_not_needed(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setattr(figures, "_cores", lambda: 2)
    with figures.figure_server():
        with pytest.raises(ValueError, match="a figure's own error"):
            figures.draw_all([_fails])
        figures.draw_all([partial(_record_pid, tmp_path / "after_error")])
        assert _pid_of(tmp_path / "after_error") != os.getpid()  # still serving
        figures._SERVER[0][0].kill()
        figures._SERVER[0][0].join()
        figures.draw_all([partial(_record_pid, tmp_path / "after_kill")])
    assert _pid_of(tmp_path / "after_kill") == os.getpid()
