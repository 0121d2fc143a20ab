"""Atomic artifact writing and content digests.

Every file npuflow writes goes to a temporary name in the same folder and is renamed into
place, so a crash or a kill never leaves a half-written artifact that a later run trusts.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline.errors import UserError


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temp path beside ``path``; rename it into place only if the block succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: Path, data: Any, compact: bool = False, rows: bool = False) -> None:
    """Stable JSON: sorted keys, fixed float repr, trailing newline (byte-identical reruns).
    ``compact``: no indentation, for files that tools read rather than people (a Chrome
    trace): Python's JSON encoder is C only without indentation, ~8x faster. ``rows``: a
    file of many records that people read too (a plan's kernels, a timeline's tasks): each
    top-level key, and each item of a top-level list, on its own line, written compactly,
    at the C encoder's speed (the indented plan.json was a third of a sweep point's
    compile)."""
    if rows:
        text = _rows(data)
    elif compact:
        text = _compact(data)
    else:
        text = json.dumps(data, indent=2, sort_keys=True, default=_jsonable)
    write_text(path, text + "\n")


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=_jsonable, separators=(",", ":"))


def _rows(data: Any) -> str:
    """``rows``: a list one item a line; a dict one key a line, a list value one item a
    line under its key."""
    def items(values: list, indent: str) -> str:
        return "[\n" + ",\n".join(indent + _compact(v) for v in values) + "\n" + indent[2:] + "]"

    if isinstance(data, list):
        return items(data, "  ") if data else "[]"
    if not isinstance(data, dict):
        return _compact(data)
    lines = [f"  {_compact(str(key))}: " + (items(value, "    ") if isinstance(value, list)
                                             and value else _compact(value))
             for key, value in sorted(data.items())]
    return "{\n" + ",\n".join(lines) + "\n}" if lines else "{}"


def write_csv(path: Path, rows: list[dict[str, Any]], fields: Sequence[str]) -> None:
    """A CSV with a fixed column order; keys outside ``fields`` are ignored."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fields), lineterminator="\n",
                            extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buf.getvalue())


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV this project wrote; [] when the file does not exist."""
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, imported when a figure is drawn: importing it
    costs ~0.5 s, which a run that draws nothing (a sweep point, the API) should not pay."""
    import matplotlib

    matplotlib.use("Agg")
    # plain tick labels: an accuracy axis from 0.64330 to 0.64334 reads as such, not as
    # "1e-5 + 6.433e-1"
    matplotlib.rcParams["axes.formatter.useoffset"] = False
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """A matplotlib figure as PNG, atomically and without timestamp metadata (same plot,
    same bytes), then closed."""
    plt = pyplot()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_DIGESTS: dict[tuple[int, int, int, int], str] = {}


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, remembered per process for the same inode, size and
    modification time: a sweep job's restored artifacts are hard links to the cache's
    files, so each is hashed once per process instead of once per job and stage (writing a
    file changes its mtime, so an edited file is hashed again)."""
    st = path.stat()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = hash_file(path)
    return _DIGESTS[key]


def hash_file(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def bytes_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def replace_dir(tmp_dir: Path, final_dir: Path) -> None:
    """Move a finished temp folder into place, replacing an older one (rename, not copy)."""
    if final_dir.exists():
        old = final_dir.with_name(f".{final_dir.name}.old-{os.getpid()}")
        os.replace(final_dir, old)
        os.replace(tmp_dir, final_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp_dir, final_dir)


def check_writable(folder: Path, key: str) -> None:
    """Before long work whose results go to ``folder``: it (or the nearest existing folder
    above it, where it will be created) accepts a new file. Tried with a real temporary
    file, since permission bits say nothing of a read-only mount and root ignores them."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{key}: '{folder}' cannot be created: '{probe}' is a file")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise UserError(f"{key}: cannot write in '{probe}': "
                        f"{exc.strerror or type(exc).__name__}") from exc
