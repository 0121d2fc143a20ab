"""Content digests of the user's files, remembered across runs by size, inode and times.

A stage's cache key covers every file outside the run that its result depends on (a data
folder of thousands of images, a model's external weights): hashing them all on every run
would cost seconds, so a digest is kept in ``<cache_dir>/digests.sqlite`` under the file's
absolute path with its device, inode, size, mtime and ctime, and reused while all five are
unchanged (the way git's index and DVC's state database do it). ctime cannot be set by a
user or a copy tool that preserves mtimes (``cp -p``, ``rsync -t``), so a rewritten file is
always hashed again. A file changed less than two seconds before it was hashed is not
remembered: a second edit in the same timestamp tick would otherwise look unchanged
(git's "racily clean" rule). SQLite makes the table safe for parallel sweep jobs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
from pathlib import Path

from pipeline.artifacts import hash_file

RACY_SECONDS = 2.0
_SCHEMA = ("CREATE TABLE IF NOT EXISTS digests (path TEXT PRIMARY KEY, dev INTEGER, "
           "ino INTEGER, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, sha256 TEXT)",
           "CREATE TABLE IF NOT EXISTS derived (key TEXT PRIMARY KEY, value TEXT)")


@functools.cache
def _connection(root: str) -> sqlite3.Connection | None:
    """The store of a cache folder, or None when it cannot be opened (a read-only cache
    still works: digests are then computed every run)."""
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(Path(root) / "digests.sqlite"), timeout=30,
                               isolation_level=None)
        for statement in _SCHEMA:
            conn.execute(statement)
    except sqlite3.Error:
        return None
    return conn


_SEEN: dict[tuple[str, tuple[int, ...]], str] = {}  # this process's digests, by full stamp


def digest(root: Path, path: Path) -> str:
    """sha256 of ``path``'s bytes, from the store when the file is unchanged (read at most
    once per process for each state of the file)."""
    path = path.resolve()
    st = path.stat()
    stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if (str(path), stamp) in _SEEN:
        return _SEEN[str(path), stamp]
    _SEEN[str(path), stamp] = value = _stored(root, path, stamp, st)
    return value


def _stored(root: Path, path: Path, stamp: tuple[int, ...], st: os.stat_result) -> str:
    conn = _connection(str(root))
    if conn is not None:
        try:
            row = conn.execute("SELECT dev, ino, size, mtime_ns, ctime_ns, sha256 FROM digests "
                               "WHERE path = ?", (str(path),)).fetchone()
        except sqlite3.Error:
            row = None
        if row is not None and tuple(row[:5]) == stamp:
            return str(row[5])
    value = hash_file(path)
    settled = time.time() - max(st.st_mtime, st.st_ctime) > RACY_SECONDS
    if conn is not None and settled:
        with contextlib.suppress(sqlite3.Error):  # locked or read-only: still right
            conn.execute("INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (str(path), *stamp, value))
    return value

