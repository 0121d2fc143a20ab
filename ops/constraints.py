"""NPU constraint checks: one small function per rule, its docstring the rule a user reads.

The pattern follows Arm Vela's supported-operators checks: each check returns whether the
node passes and a detail string ("kernel 5x5"), and its docstring, formatted with the
profile's limits, is the text shown in the compile log and in the generated supported-ops
table. The *logic* of a rule lives here and with its op family; the *limits* come from the
hardware profile's ``ops: {OpType: {limit: value}}`` section. A rule whose limit the
profile does not set is not enforced (and not listed for that profile).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ops.graph import Graph, Node


@dataclass(frozen=True)
class CheckResult:
    rule: str  # the check's stable name, e.g. "kernel_size"
    text: str  # the rule as the user reads it, limits filled in
    passed: bool
    detail: str  # what this node has, e.g. "kernel 3x3"


@dataclass(frozen=True)
class Constraint:
    name: str
    limits: tuple[str, ...]  # profile keys this rule reads; all absent -> not enforced
    doc: str
    fn: Callable[[Node, Graph, Mapping[str, Any]], tuple[bool, str]]

    def applies(self, limits: Mapping[str, Any]) -> bool:
        return not self.limits or any(k in limits for k in self.limits)

    def text(self, limits: Mapping[str, Any]) -> str:
        return self.doc.format(**{k: _show(limits.get(k, "-")) for k in self.limits})

    def check(self, node: Node, graph: Graph, limits: Mapping[str, Any]) -> CheckResult:
        passed, detail = self.fn(node, graph, limits)
        return CheckResult(self.name, self.text(limits), bool(passed), detail)


def constraint(*limit_keys: str) -> Callable[[Callable], Constraint]:
    """Turn ``fn(node, graph, limits) -> (passed, detail)`` into a :class:`Constraint`."""

    def wrap(fn: Callable) -> Constraint:
        doc = " ".join((fn.__doc__ or fn.__name__).split())
        return Constraint(fn.__name__.removeprefix("check_"), limit_keys, doc, fn)

    return wrap


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def run_checks(
    checks: Sequence[Constraint], node: Node, graph: Graph, limits: Mapping[str, Any]
) -> list[CheckResult]:
    return [c.check(node, graph, limits) for c in checks if c.applies(limits)]


def int_pair(values: Any, default: int = 1) -> tuple[int, int]:
    """An ONNX (h, w) attribute as a pair; missing -> (default, default)."""
    if not values:
        return default, default
    values = list(values)
    return (int(values[0]), int(values[-1]))


# -- rules shared by every op family ---------------------------------------------------


@constraint()
def check_static_shape(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Every input and output tensor must have a static shape"""
    unknown = [t for t in (*node.inputs, *node.outputs) if t and graph.tensors[t].shape is None]
    return not unknown, f"dynamic: {', '.join(unknown)}" if unknown else "all static"


def moved_rank(perm: list[int], shape: tuple[int, ...]) -> int:
    """The rank a transpose moves data in: size-1 axes dropped, and input axes that stay
    next to each other, in order, merged into one (a window partition's 6-D
    ``(1, n, w, n, w, c) -> (1, n, n, w, w, c)`` moves a 4-D block: RKNN-Toolkit2 2.5.0
    runs MobileSAM's as ``exWindow`` layers on the NPU)."""
    kept = [a for a in perm if shape[a] != 1]
    groups = 0
    for i, axis in enumerate(kept):
        if i == 0 or axis != kept[i - 1] + 1:
            groups += 1
    return groups


@constraint("max_rank")
def check_rank(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Tensors must have rank at most {max_rank}"""
    ranks = [len(t.shape) for t in graph.output_tensors(node) if t and t.shape is not None]
    rank = max(ranks, default=0)
    source = graph.tensors[node.inputs[0]].shape if node.inputs else None
    if node.op_type == "Transpose" and source is not None and rank > limits["max_rank"]:
        perm = [int(a) for a in node.attrs.get("perm", range(len(source) - 1, -1, -1))]
        moved = moved_rank(perm, tuple(source))
        return moved <= limits["max_rank"], f"rank {rank}, {moved} once merged"
    return rank <= limits["max_rank"], f"rank {rank}"


@constraint("max_elements")
def check_max_elements(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """The output may hold at most {max_elements} elements"""
    size = max((t.size for t in graph.output_tensors(node) if t), default=0)
    return size <= limits["max_elements"], f"{size} elements"


COMMON = (check_static_shape, check_rank, check_max_elements)


@constraint("stride_max")
def check_stride(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Stride must be at most {stride_max} in both dimensions"""
    sh, sw = int_pair(node.attrs.get("strides"))
    return max(sh, sw) <= limits["stride_max"], f"stride {sh}x{sw}"
