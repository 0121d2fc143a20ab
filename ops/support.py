"""Is this node supported on the NPU? One entry point for placement, logs and docs.

A node passes when its op type is in the profile's ``ops:`` table and every rule of its
family whose limit that table sets passes. The results keep every check, PASS or FAIL,
so the compile log can print them as the seeds' logs do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ops.constraints import CheckResult, run_checks
from ops.graph import Graph, Node
from ops.registry import spec_for


def check_node(node: Node, graph: Graph, ops_table: Mapping[str, Mapping[str, Any]]
               ) -> tuple[bool, list[CheckResult]]:
    spec = spec_for(node)
    if not spec.known:
        why = "control flow" if node.subgraphs else (
            f"custom domain '{node.domain}'" if node.domain not in ("", "ai.onnx")
            else "no op spec")
        return False, [CheckResult("known_op", "Op type must be known to npuflow", False,
                                   f"'{node.op_type}': {why}")]
    listed = node.op_type in ops_table
    result = CheckResult("supported_op", "Op type must be in the hardware's supported list",
                         listed, f"'{node.op_type}'" + ("" if listed else " not in list"))
    if not listed:
        return False, [result]
    limits = ops_table[node.op_type] or {}
    checks = [result, *run_checks(spec.checks, node, graph, limits)]
    return all(c.passed for c in checks), checks
