"""The stage cache shared by runs and sweep jobs.

key = sha256(stage name, component class and version, npuflow's source digest, the stage's
own config slice, and the content digests of its upstream folders). A sweep over compile
or simulate keys therefore re-runs only those stages; export, optimize and quantize are
restored from the cache.

Entries are written as ``<key>.tmp-<pid>`` and renamed to ``<key>`` only after a ``COMPLETE``
marker is in place, so a job killed mid-write leaves no entry a later run would trust, and
two parallel jobs computing the same entry race harmlessly (the second rename loses and its
copy is discarded). The marker holds the digest of the entry's files: an entry whose files
no longer match it (a disk error, an edit, a truncated copy) is removed with a warning and
recomputed, so a corrupted cache never fails a run.

    python -m pipeline.cache info [DIR]     # entries and size per stage
    python -m pipeline.cache clear [DIR]    # remove everything
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline.artifacts import file_digest
from pipeline.running import digest_store, user_code

log = logging.getLogger("npuflow")
MARKER = "COMPLETE"
_NOT_KEYED = ("cache_dir", "cache", "replace")  # where runs and the cache live: not results


def folder_digest(folder: Path) -> str:
    """Digest of a folder's files (names and contents); the cache marker is not content."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER):
        h.update(str(path.relative_to(folder)).encode())
        h.update(file_digest(path).encode())
    return h.hexdigest()


@functools.cache
def code_digest() -> str:
    """Digest of npuflow's own source (pipeline, ops, hardware): a code change invalidates
    every entry, so a stale result can never be served after an edit or an upgrade."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for pkg in ("pipeline", "ops", "hardware"):
        for path in sorted((root / pkg).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def stage_key(name: str, stage: Any, cfg: DictConfig, inputs: dict[str, Path],
              root: Path, values: dict | None = None) -> str:
    """The entry's key: everything the stage's result depends on. Besides its config slice
    and upstream folders, that is the user's code the slice or the stage component names
    and every file outside the run it reads (``pipeline.running.user_code``), their digests kept
    in ``root``'s digest store so an unchanged file is not read again. ``values``: the
    slice resolved, if the caller has it (not modified here)."""
    config = dict(values) if values is not None else OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(config, dict)
    run = dict(config.get("run", {}))
    for k in _NOT_KEYED:
        run.pop(k, None)
    config["run"] = run
    files = set(stage.external_files(cfg)) if hasattr(stage, "external_files") else set()
    files.update(user_code.named_files(config))
    modules = set(user_code.named_modules(config))
    component = type(stage).__module__.split(".")[0]
    if component not in user_code.OWN_PACKAGES:
        modules.add(component)
    code: dict[str, Any] = {}
    for module in sorted(modules):
        sources, identity = user_code.source_files(module)
        code[module] = identity or {str(f): digest_store.digest(root, f) for f in sources}
    payload = {
        "stage": name,
        "component": f"{type(stage).__module__}.{type(stage).__qualname__}",
        "version": getattr(stage, "version", "0"),
        "code": code_digest(),
        "user_code": code,
        "config": config,
        "inputs": {k: folder_digest(v) for k, v in sorted(inputs.items())},
        "files": sorted([str(f), digest_store.digest(root, f)]
                        for f in {Path(f).resolve() for f in files} if f.is_file()),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()
                          ).hexdigest()[:32]


@contextlib.contextmanager
def locked(root: Path, name: str, key: str) -> Iterator[None]:
    """Hold an exclusive lock on one key while it is looked up or computed, so parallel
    sweep jobs that need the same upstream entry compute it once and the others wait and
    restore it (fcntl locks are released by the kernel if the holder dies)."""
    path = root / "stages" / name / f"{key}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def entry(root: Path, name: str, key: str) -> Path:
    return root / "stages" / name / key


def lookup(root: Path, name: str, key: str) -> Path | None:
    """The entry for ``key`` if it is complete and its files match their digest; a
    corrupted entry is removed (and logged) so that the caller recomputes it."""
    path = entry(root, name, key)
    marker = path / MARKER
    if not marker.is_file():
        return None
    if marker.read_text().strip() == folder_digest(path):
        return path
    log.warning("cache entry %s does not match its digest (corrupted); removed, recomputing",
                path)
    shutil.rmtree(path, ignore_errors=True)
    return None


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem, or links not allowed
        shutil.copy2(src, dst)


def restore(cached: Path, dest: Path) -> None:
    """Hard-link an entry's files into a run folder (a copy across filesystems). Stages
    never write into an upstream folder, so sharing the inode is safe; an edit made in a
    run folder anyway changes the entry, which the digest check then catches."""
    shutil.copytree(cached, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(MARKER),
                    copy_function=_link_or_copy)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_orphans(final: Path) -> None:
    """Temporary copies of this entry left by a process that was killed mid-store (the
    key's lock is held, so a living writer of the same key cannot be in the middle)."""
    for tmp in final.parent.glob(f"{final.name}.tmp-*"):
        pid = tmp.name.rpartition("-")[2]
        if not pid.isdigit() or not _alive(int(pid)) or int(pid) == os.getpid():
            shutil.rmtree(tmp, ignore_errors=True)


def store(root: Path, name: str, key: str, produced: Path) -> None:
    """Copy a finished stage folder into the cache. Any failure (a full disk, a file-size
    limit, an interrupt) removes the partial copy before it propagates: the cache holds
    complete entries or nothing."""
    final = entry(root, name, key)
    if (final / MARKER).is_file():
        return
    _remove_orphans(final)
    tmp = final.with_name(f"{key}.tmp-{os.getpid()}")
    try:
        shutil.copytree(produced, tmp)
        (tmp / MARKER).write_text(folder_digest(tmp) + "\n")
        try:
            if not final.exists():
                os.replace(tmp, final)
        except OSError:
            pass  # a parallel job stored the same entry first
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def info(root: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for stage_dir in sorted((root / "stages").glob("*")):
        entries = [e for e in stage_dir.iterdir() if e.is_dir() and (e / MARKER).is_file()]
        size = sum(f.stat().st_size for e in entries for f in e.rglob("*") if f.is_file())
        out[stage_dir.name] = {"entries": len(entries), "bytes": size}
    return out


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "info"
    root = Path(args[1] if len(args) > 1 else ".npuflow-cache")
    if command == "info":
        table = info(root)
        for stage, row in table.items():
            print(f"{stage:10s} {row['entries']:5d} entries {row['bytes'] / 1e6:10.1f} MB")
        print(f"total {sum(r['bytes'] for r in table.values()) / 1e6:.1f} MB in {root}")
    elif command == "clear":
        shutil.rmtree(root / "stages", ignore_errors=True)
        print(f"cleared {root / 'stages'}")
    else:
        sys.exit("usage: python -m pipeline.cache info|clear [DIR]")


if __name__ == "__main__":
    main()
