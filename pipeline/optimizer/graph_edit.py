"""Small ONNX graph-surgery helpers shared by npuflow's own passes."""

from __future__ import annotations

import math

import onnx


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    table: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            if name:
                table.setdefault(name, []).append(node)
    return table


def producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output}


def bypass(graph: onnx.GraphProto, node: onnx.NodeProto, replacement: str) -> None:
    """Remove ``node`` (single output) and make its readers read ``replacement``. When the
    output is a graph output, the producer of ``replacement`` is renamed instead, so the
    graph's interface keeps its names."""
    out = node.output[0]
    if out in {o.name for o in graph.output}:
        for other in graph.node:
            for i, name in enumerate(other.output):
                if name == replacement:
                    other.output[i] = out
            for i, name in enumerate(other.input):
                if name == replacement and other is not node:
                    other.input[i] = out
    else:
        for other in graph.node:
            for i, name in enumerate(other.input):
                if name == out:
                    other.input[i] = replacement
    graph.node.remove(node)


SHAPE_VALUE_ELEMENTS = 64  # shape arithmetic reads initializers no larger than this


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its large initializers' payloads (name, type and dims kept): all
    ONNX shape inference needs. Inference reads an initializer's values only to fold shape
    arithmetic (Reshape's shape, Slice's starts: a few int64s); handing it a VGG's 575 MB
    of weights made it serialise them on every call, most of the optimize stage's time.
    tests/test_optimize.py checks the inferred shapes are the full model's."""
    out = onnx.ModelProto()
    out.ir_version = model.ir_version
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    g, src = out.graph, model.graph
    g.name = src.name
    for mine, theirs in ((g.node, src.node), (g.input, src.input), (g.output, src.output),
                         (g.value_info, src.value_info),
                         (g.sparse_initializer, src.sparse_initializer)):
        mine.extend(theirs)
    for init in src.initializer:
        if math.prod(init.dims) <= SHAPE_VALUE_ELEMENTS:
            g.initializer.append(init)
        else:
            stub = g.initializer.add()
            stub.name, stub.data_type = init.name, init.data_type
            stub.dims.extend(init.dims)
    return out


def static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    inferred = onnx.shape_inference.infer_shapes(skeleton(model), data_prop=True)
    g = inferred.graph
    shapes = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [int(d.dim_value) for d in dims]
    for init in g.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def drop_unused_opsets(model: onnx.ModelProto) -> onnx.ModelProto:
    """Keep only opset imports the graph uses (libraries leave runtime domains behind)."""
    used = {n.domain for n in model.graph.node} | {""}
    keep = [o for o in model.opset_import if o.domain in used or o.domain == "ai.onnx"]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    return model
