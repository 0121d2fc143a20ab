"""The facts of an exported model that ``export/model.json`` records and users compare with
published figures: inputs, outputs, node and MAC counts, learnable parameters, opset."""

from __future__ import annotations

from collections import Counter
from typing import Any

import onnx

from ops.graph import Graph
from ops.registry import spec_for, work_of

# Initializer inputs that are constants of the op, not learned parameters.
_NON_PARAMETER_INPUTS = {
    "BatchNormalization": {3, 4},  # running mean / variance are buffers, not parameters
    "Resize": {1, 2, 3},
    "Clip": {1, 2},
    "Reshape": {1},
    "Pad": {1, 2},
}


def count_parameters(model: onnx.ModelProto) -> int:
    """Learnable parameters, counted as torchvision does (BN running stats and scalar
    constants such as epsilon, clip bounds or a 1/sqrt(d) scale are not parameters).
    Weights held in Constant nodes count as initializers do (paddle2onnx writes every
    weight of PaddleOCR's models that way)."""
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
              onnx.TensorProto.BFLOAT16}
    inits = {i.name: i for i in model.graph.initializer if i.data_type in floats}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None and value.data_type in floats:
                inits.setdefault(node.output[0], value)
    excluded = set()
    for node in model.graph.node:
        for idx in _NON_PARAMETER_INPUTS.get(node.op_type, ()):
            if idx < len(node.input):
                excluded.add(node.input[idx])
    total = 0
    for name, init in inits.items():
        size = 1
        for d in init.dims:
            size *= d
        if name not in excluded and size > 1:
            total += size
    return total


def _io(values: Any) -> list[dict[str, Any]]:
    out = []
    for vi in values:
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in vi.type.tensor_type.shape.dim]
        elem = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        out.append({"name": vi.name, "shape": dims, "dtype": str(elem)})
    return out


def summarize(model: onnx.ModelProto, graph: Graph) -> dict[str, Any]:
    inits = {i.name for i in model.graph.initializer}
    macs = sum(work_of(node, graph).macs for node in graph)
    unknown_ops = sorted({n.op_type for n in graph if not spec_for(n).known})
    dynamic = sorted(t.name for t in graph.tensors.values() if t.shape is None)
    return {
        "name": model.graph.name,
        "opset": graph.opset,
        "inputs": _io(i for i in model.graph.input if i.name not in inits),
        "outputs": _io(model.graph.output),
        "nodes": len(model.graph.node),
        "op_types": dict(sorted(Counter(n.op_type for n in graph).items())),
        "macs": int(macs),
        "parameters": count_parameters(model),
        "unknown_op_types": unknown_ops,
        "tensors_without_static_shape": len(dynamic),
    }
