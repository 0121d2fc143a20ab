"""Config nodes whose values can no longer change, known by identity.

A sweep shares the groups its jobs do not change, read-only and without interpolations
(``pipeline.sweeps.sweep_compose``), and a run's stage slices are built from resolved
values (``pipeline.running.runner``). Resolving or serialising such a node again on every
use (~1.3 ms for a hardware profile, several uses a sweep point) gives what it gave the
first time, so what was derived from it is remembered with it. An entry goes with its
node."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# id(node) -> (the node, what was derived from it by name)
_FIXED: dict[int, tuple[weakref.ref, dict[str, Any]]] = {}


def declare_fixed(node: Any) -> None:
    """Declare that ``node``'s values can no longer change (read-only, no interpolation;
    an entry is dropped if the node is found writable)."""
    ident = id(node)
    _FIXED[ident] = (weakref.ref(node, lambda _: _FIXED.pop(ident, None)), {})


def remembered(node: Any, what: str, make: Callable[[], T]) -> T:
    """``make()``; for a node declared fixed, the result its first call gave (so callers
    must not modify it). An exception is raised each time, never remembered."""
    fixed = _FIXED.get(id(node))
    if fixed is None or fixed[0]() is not node:
        return make()
    if not node._get_node_flag("readonly"):  # made writable after all: forget it
        _FIXED.pop(id(node), None)
        return make()
    if what not in fixed[1]:
        fixed[1][what] = make()
    return fixed[1][what]
