"""Op type -> its family's spec: the work it is and the NPU rules it must pass.

An op type no family knows is kept (:data:`UNKNOWN`): its work is estimated as one vector
op per output element, it has no NPU rules, and placement sends it to the CPU with the
reason "unknown op type". Nothing crashes on an unfamiliar graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ops import activation, conv, elementwise, gemm, memory, norm, pool, reduce, resize
from ops.constraints import COMMON, Constraint
from ops.graph import Graph, Node
from ops.work import VECTOR, Work


@dataclass(frozen=True)
class OpSpec:
    family: str
    work: Callable[[Node, Graph], Work]
    checks: Sequence[Constraint]
    known: bool = True


def _unknown_work(node: Node, graph: Graph) -> Work:
    out = sum(t.size for t in graph.output_tensors(node) if t)
    inp = sum(t.size for t in graph.input_tensors(node) if t)
    return Work(VECTOR, vector_ops=out, input_elems=inp, output_elems=out)


UNKNOWN = OpSpec("unknown", _unknown_work, COMMON, known=False)

_FAMILIES: list[tuple[OpSpec, tuple[str, ...]]] = [
    (OpSpec("conv", conv.conv_work, conv.CONV_CHECKS), ("Conv",)),
    (OpSpec("conv_transpose", conv.conv_transpose_work, conv.CONV_TRANSPOSE_CHECKS),
     ("ConvTranspose",)),
    (OpSpec("gemm", gemm.gemm_work, gemm.GEMM_CHECKS), ("Gemm",)),
    (OpSpec("matmul", gemm.matmul_work, gemm.GEMM_CHECKS), ("MatMul",)),
    (OpSpec("pool", pool.pool_work, pool.POOL_CHECKS),
     ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool")),
    (OpSpec("elementwise", elementwise.binary_work, elementwise.BINARY_CHECKS),
     ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal",
      "Greater", "Less", "And", "Or")),
    (OpSpec("activation", activation.activation_work, activation.ACTIVATION_CHECKS),
     tuple(k for k in activation.OPS_PER_ELEMENT if k not in ("Softmax", "LogSoftmax"))),
    (OpSpec("softmax", activation.activation_work, activation.SOFTMAX_CHECKS),
     ("Softmax", "LogSoftmax")),
    (OpSpec("norm", norm.norm_work, norm.NORM_CHECKS),
     ("BatchNormalization", "LayerNormalization", "InstanceNormalization",
      "GroupNormalization", "LpNormalization")),
    (OpSpec("resize", resize.resize_work, resize.RESIZE_CHECKS), ("Resize", "Upsample")),
    (OpSpec("concat", memory.memory_work, memory.CONCAT_CHECKS), ("Concat", "Split")),
    (OpSpec("memory", memory.memory_work, memory.MEMORY_CHECKS),
     ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose",
      "Slice", "Pad", "Gather", "Tile", "Expand", "DepthToSpace", "SpaceToDepth",
      "Shape", "ConstantOfShape", "Constant")),
    (OpSpec("reduce", reduce.reduce_work, reduce.REDUCE_CHECKS),
     ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
      "ArgMax", "ArgMin")),
]
SPECS: dict[str, OpSpec] = {op: spec for spec, ops in _FAMILIES for op in ops}


def spec_for(node: Node) -> OpSpec:
    if node.domain not in ("", "ai.onnx") or node.subgraphs:
        return UNKNOWN
    return SPECS.get(node.op_type, UNKNOWN)


class OpSpecError(RuntimeError):
    """An op spec failed on a node whose shapes are all known: a bug in npuflow's spec (or
    an attribute it does not handle), never to be passed off as an unknown op."""


def _static(node: Node, graph: Graph) -> bool:
    tensors = [*graph.input_tensors(node), *graph.output_tensors(node)]
    return all(t is not None and t.shape is not None for t in tensors)


def work_of(node: Node, graph: Graph) -> Work:
    """The node's work. A node whose shapes are not static is estimated as unknown; a
    spec that fails on a fully shaped node raises, naming the node and its op."""
    spec = spec_for(node)
    if not _static(node, graph):
        try:
            return spec.work(node, graph)
        except (ValueError, TypeError, IndexError, KeyError):
            return _unknown_work(node, graph)
    try:
        return spec.work(node, graph)
    except Exception as exc:  # any failure: re-raised with the node named
        raise OpSpecError(f"npuflow's {spec.family} spec failed on node '{node.name}' "
                          f"({node.op_type}): {type(exc).__name__}: {exc}") from exc
