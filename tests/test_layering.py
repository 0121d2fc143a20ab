"""The design's layering: imports only point downward (pipeline -> hardware -> ops)."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO

FORBIDDEN = {"ops": ("hardware", "pipeline", "hydra"), "hardware": ("pipeline", "hydra")}


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_lower_layers_do_not_import_upper_ones(layer):
    for path in sorted((REPO / layer).rglob("*.py")):
        for module in _imports(path):
            top = module.split(".")[0]
            assert top not in FORBIDDEN[layer], f"{path.relative_to(REPO)} imports {module}"


def _module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path, names: set[str]):
    """The project modules ``path`` imports: ``from pkg import mod`` counts ``pkg.mod``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in names)
        elif isinstance(node, ast.ImportFrom) and node.module in names:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            yield from [m for m in subs if m in names] or [node.module]


def test_no_module_imports_itself_back():
    """No import cycle among npuflow's own modules, counting imports inside functions (a
    deferred import hides a cycle from Python, not from the next reader)."""
    import networkx as nx

    paths = [p for root in ("ops", "hardware", "pipeline")
             for p in sorted((REPO / root).rglob("*.py"))]
    names = {_module_name(p) for p in paths}
    graph = nx.DiGraph()
    for path in paths:
        me = _module_name(path)
        for target in _imported_modules(path, names):
            if target != me and not me.startswith(target + "."):  # a package's own __init__
                graph.add_edge(me, target)
    cycles = sorted(nx.simple_cycles(graph), key=len)
    assert not cycles, f"{len(cycles)} import cycles, e.g. {cycles[:3]}"
