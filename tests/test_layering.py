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
