"""The config schema's keys: every dotted key it declares, and the closest ones to a
misspelt name. Its own module because the door check (``pipeline.configuration.config``),
the CLI and ``describe`` all need it, and ``describe`` also composes configs through
``pipeline.api``, which runs the door check: kept in describe, it closed an import cycle."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
import sys
import typing
from functools import cache
from typing import Any

_FIELD = re.compile(r"^\s+(\w+)\s*:\s*[^=]")


def schema_class() -> type:
    from pipeline.configuration.schema import NpuflowConfig

    return NpuflowConfig


def type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def all_keys(cls: type | None = None, prefix: str = "") -> list[str]:
    """Every dotted key the schema declares (sections and leaves)."""
    cls = cls or schema_class()
    out = []
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        out.append(key)
        kind = hints.get(f.name)
        if dataclasses.is_dataclass(kind):
            out += all_keys(kind, key + ".")
    return out


def did_you_mean(name: str, known: list[str]) -> str:
    """`` (did you mean a, b?)`` for the closest known names, or ''."""
    close = difflib.get_close_matches(name, list(dict.fromkeys(known)), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's comment: the ``#`` block right above it plus its end-of-line comment."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# ").rstrip())
            continue
        match = _FIELD.match(line)
        if match and not stripped.startswith(("def ", "@", '"')):
            trailing = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            docs[match.group(1)] = " ".join([*pending, trailing]).strip()
        pending = []
    return docs
