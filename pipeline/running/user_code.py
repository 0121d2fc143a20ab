"""The user's own code and files that a config names, as digests for the stage cache key.

A config can name code npuflow does not ship: a PyTorch factory (``model.module``), a
metric, a stage or an optimize pass (any ``_target_``). An edit to that code changes the
result, so the key of every stage whose config names it covers the code's source:

- a module inside a package: every ``.py`` file of its top-level package (a factory
  imports its package's other modules);
- a top-level module file: it and the ``.py`` files beside it (a flat project's modules
  import each other);
- an installed distribution (site-packages, the standard library): its name and version;
- npuflow's own modules: nothing here (the key already holds npuflow's source digest).

Modules are found with ``importlib.machinery.PathFinder`` on ``sys.path``, without
importing them: computing a key never runs the user's code. Files a config names by path
(``model.path``, ``model.weights``, ``eval.metric.characters``, any string value that is
an existing file) are listed too, so a new key that names a file is covered without being
declared anywhere.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.metadata
import sys
import sysconfig
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from pipeline.errors import UserError

T = TypeVar("T")
_NPUFLOW_ROOT = Path(__file__).resolve().parents[2]

OWN_PACKAGES = frozenset({"pipeline", "ops", "hardware", "hydra_plugins"})
_OWN_ROOTS = tuple(str(_NPUFLOW_ROOT / p) for p in sorted(OWN_PACKAGES))
MODULE_KEYS = ("_target_", "module")  # config keys whose value names Python code


def named_modules(config: Any) -> list[str]:
    """Top-level module names of every ``_target_`` / ``module`` value in a config tree."""
    found = {_top(v) for k, v in _items(config) if k in MODULE_KEYS and isinstance(v, str)}
    return sorted(name for name in found if name and name not in OWN_PACKAGES)


def named_files(config: Any) -> list[Path]:
    """Every string value in a config tree that names an existing file."""
    out = set()
    for _, value in _items(config):
        if isinstance(value, str) and value and "\n" not in value and len(value) < 4096:
            try:
                path = Path(value)
                if path.is_file():
                    out.add(path.resolve())
            except (OSError, ValueError):
                continue
    return sorted(out)


def _items(config: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(config, dict):
        for key, value in config.items():
            yield str(key), value
            yield from _items(value)
    elif isinstance(config, list | tuple):
        for value in config:
            yield "", value
            yield from _items(value)


def _top(target: str) -> str:
    return target.partition(":")[0].split(".")[0].strip()


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {sys.prefix, sys.base_prefix, paths["stdlib"], paths["purelib"], paths["platlib"]}
    return tuple(sorted(str(Path(r).resolve()) for r in roots if r))


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def source_files(top: str) -> tuple[list[Path], str | None]:
    """The user's files behind top-level module ``top``, or ([], what identifies it) for
    installed and built-in code; ([], None) when it cannot be found (the stage that
    imports it reports that)."""
    spec = importlib.machinery.PathFinder.find_spec(top, sys.path)
    if spec is None:
        return [], f"{top} (builtin)" if top in sys.builtin_module_names else None
    locations = list(spec.submodule_search_locations or [])
    origin = Path(spec.origin).resolve() if spec.origin and spec.origin != "namespace" \
        else None
    anchor = Path(locations[0]).resolve() if locations else origin
    if anchor is None:
        return [], None
    if str(anchor).startswith(_installed_roots()):
        dists = _distributions().get(top, [])
        versions = [f"{d}=={importlib.metadata.version(d)}" for d in sorted(dists)]
        return [], " ".join(versions) or f"{top} in {anchor.parent}"
    if locations:
        files = [f for loc in locations for f in Path(loc).rglob("*.py")
                 if "__pycache__" not in f.parts]
    else:
        files = [origin] + [f for f in origin.parent.glob("*.py") if f != origin]
    return sorted({f.resolve() for f in files if f.is_file()}), None


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame outside installed code (the user's line), or of
    a SyntaxError's position."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{Path(exc.filename).name}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in frames if not f.filename.startswith("<")]  # frozen importlib
    own = [f for f in frames if not f.filename.startswith(_installed_roots() + _OWN_ROOTS)]
    return f"{Path(own[-1].filename).name}:{own[-1].lineno}" if own else ""


def explain(exc: BaseException) -> str:
    """One line for an exception raised in the user's code: type, first line, where."""
    text = str(exc.msg if isinstance(exc, SyntaxError) else exc).strip()
    first = text.splitlines()[0][:200] if text else ""
    where = _where(exc)
    return f"{type(exc).__name__}{': ' + first if first else ''}" + (f" ({where})" if where
                                                                      else "")


_IMPORTED: dict[str, tuple[tuple[str, int, int], ...]] = {}  # top module -> its files' stamps


def _stamps(top: str) -> tuple[tuple[str, int, int], ...]:
    files, _ = source_files(top)
    return tuple((str(f), (st := f.stat()).st_size, st.st_mtime_ns) for f in files)


def refresh(config: Any) -> None:
    """Forget the user's modules whose files changed since this process imported them: a
    process that runs twice (the in-process API, a notebook, a sweep worker) would
    otherwise run the module it imported first under the key of the edited one."""
    for top in named_modules(config):
        stamps = _stamps(top)
        if _IMPORTED.get(top, stamps) != stamps:
            files = {name for name, _, _ in stamps}
            for name, module in list(sys.modules.items()):
                origin = getattr(module, "__file__", None)
                if name == top or name.startswith(top + ".") or (
                        origin and str(Path(origin).resolve()) in files):
                    del sys.modules[name]
            importlib.invalidate_caches()
        _IMPORTED[top] = stamps


def import_module(name: str, key: str, target: str | None = None) -> ModuleType:
    """Import a module a config names; any failure (missing, a syntax error, an exception
    at import) is one line naming ``key``, the ``target`` the config wrote and the cause."""
    try:
        return importlib.import_module(name)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"{key}: cannot import '{target or name}': {explain(exc)}") from exc


def call(key: str, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the user's code; an exception it raises is one line naming ``key``, the callable
    and the exception with its file and line (a bug in npuflow keeps its traceback only if
    it is not inside this call)."""
    try:
        return fn(*args, **kwargs)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"{key}: {what} raised {explain(exc)}") from exc


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of a chain (Hydra wraps an import's SyntaxError twice)."""
    seen = [exc]
    while (nxt := seen[-1].__cause__ or seen[-1].__context__) is not None and nxt not in seen:
        seen.append(nxt)
    return seen[-1]
