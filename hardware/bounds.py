"""Ranges declared beside a dataclass field, and the one routine that checks them.

A config or profile field says what values mean something where it is defined::

    frames: int = bounded(1, AT_LEAST_1)
    size_kb: float = bounded(MISSING, POSITIVE, plausible=(1, 1 << 20))

:func:`check_tree` walks a built dataclass tree (``OmegaConf.to_object`` of the composed
config) once, before any stage runs: a value outside its range raises
:class:`BoundsError` naming the full key and the value; a value inside the range but
outside the ``plausible`` one (a 0.001 KB SRAM, a 100000 x 100000 array) is returned as a
warning. Every float anywhere in the tree must be finite: ``.inf`` or ``nan`` never
reaches a cost formula. OmegaConf checks types and enum choices while composing; it has
no notion of a range, hence this module.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, fields, is_dataclass
from enum import StrEnum
from typing import Any


class BoundsError(ValueError):
    """A value outside its declared range; ``key`` is its full dotted name."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.reason = message


@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (``<`` where the end is open); None: unbounded."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else
                                     value <= self.high)

    def text(self) -> str:
        if self.high is None:
            return f"must be {'>' if self.low_open else '>='} {_num(self.low)}"
        if self.low is None:
            return f"must be {'<' if self.high_open else '<='} {_num(self.high)}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"must be in {left}{_num(self.low)}, {_num(self.high)}{right}"


POSITIVE = Range(low=0, low_open=True)
NON_NEGATIVE = Range(low=0)
AT_LEAST_1 = Range(low=1)
PERCENT = Range(low=0, high=100, low_open=True)


def choices(name: str, *values: str) -> type[StrEnum]:
    """An enum of allowed strings for a structured-config field. OmegaConf converts a
    string by member *name*, so each name is its value ("is" included, which the class
    syntax cannot spell); being a ``str``, a member compares, hashes and serialises as the
    plain string, so code and cache keys see "cycles", not ``Objective.cycles``. It belongs
    to the calling module, as a class statement there would, so a value holding it pickles
    (a figure sent to the figure server)."""
    return StrEnum(name, {v: v for v in values}, module=sys._getframe(1).f_globals["__name__"])


def bounded(default: Any, allowed: Range, plausible: tuple[float, float] | None = None,
            factory: Any = None) -> Any:
    """A dataclass field whose value (each item, for a list) must lie in ``allowed`` and
    should lie in ``plausible`` (else a warning); ``factory`` for a list default."""
    metadata = {"range": allowed, "plausible": plausible}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _num(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _check_finite(value: Any, key: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise BoundsError(key, f"must be a finite number, got {value}")
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_finite(item, f"{key}[{i}]")
    elif isinstance(value, dict):
        for k, item in value.items():
            _check_finite(item, f"{key}.{k}")


def check_section(value: Any, prefix: str) -> list[str]:
    """``check_tree`` for a dataclass; a plain value or mapping is only checked finite."""
    if is_dataclass(value) and not isinstance(value, type):
        return check_tree(value, prefix)
    _check_finite(value, prefix)
    return []


def check_tree(obj: Any, prefix: str) -> list[str]:
    """Check every declared range under ``obj`` (a dataclass instance); raise the first
    violation, return the plausibility warnings (each naming its key)."""
    warnings: list[str] = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        if is_dataclass(value) and not isinstance(value, type):
            warnings += check_tree(value, key)
            continue
        _check_finite(value, key)
        allowed = f.metadata.get("range")
        if allowed is None or value is None or isinstance(value, bool):
            continue
        items = enumerate(value) if isinstance(value, list | tuple) else [(None, value)]
        for i, item in items:
            where = key if i is None else f"{key}[{i}]"
            if not allowed.holds(item):
                raise BoundsError(where, f"{allowed.text()}, got {item}")
            plausible = f.metadata.get("plausible")
            if plausible and not plausible[0] <= item <= plausible[1]:
                warnings.append(f"{where} = {item} is outside the plausible range "
                                f"[{_num(plausible[0])}, {_num(plausible[1])}]; check the "
                                "unit")
    return warnings
