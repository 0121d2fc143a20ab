"""Data-movement ops. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout at
inference) move nothing and cost nothing. Copies (Transpose, Concat, Split, Slice, Pad,
Gather, Tile, Expand, DepthToSpace, SpaceToDepth) read and write every output element once:
a memory-bound op whose time is its bytes over the available bandwidth. A Gather from a
constant table (an embedding lookup) reads only the rows its indices select: the table is
held, its looked-up rows are read (a 49408 x 512 vocabulary costs 20 rows' bytes for 20
tokens, not 25 M elements)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ops.constraints import COMMON, constraint
from ops.graph import Graph, Node
from ops.work import FREE, MEMORY, Work

VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})


def memory_work(node: Node, graph: Graph) -> Work:
    out = sum(t.size for t in graph.output_tensors(node) if t)
    const = sum(graph.tensors[i].size for i in node.inputs if i and graph.tensors[i].is_const)
    act = sum(graph.tensors[i].size for i in node.inputs
              if i and not graph.tensors[i].is_const)
    if node.op_type in VIEW_OPS:
        return Work(FREE, input_elems=act, output_elems=out)
    if node.op_type == "Gather" and graph.tensors[node.inputs[0]].is_const:
        rows = min(out, const)
        return Work(MEMORY, input_elems=act, weight_elems=rows, output_elems=out,
                    unread_weight_elems=const - rows)
    return Work(MEMORY, input_elems=act, weight_elems=const, output_elems=out)


@constraint("channel_axis_only")
def check_concat_axis(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Concat/Split only along the channel axis: {channel_axis_only}"""
    rank = len(graph.tensors[node.inputs[0]].shape or ())
    axis = int(node.attrs.get("axis", 0 if node.op_type != "Concat" else 1))
    axis = axis + rank if axis < 0 else axis
    return axis == 1 or not limits["channel_axis_only"], f"axis {axis}"


MEMORY_CHECKS = COMMON
CONCAT_CHECKS = (*COMMON, check_concat_axis)
