"""Small ONNX graph-surgery helpers shared by npuflow's own passes."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

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


def infer_shapes(model: onnx.ModelProto, data_prop: bool = True) -> onnx.ModelProto:
    """``model`` given what onnx's shape inference finds, computed on its skeleton (the same
    inputs, outputs and value_info, byte for byte; tests/test_optimize.py) and written into
    it in place: inference on the model itself copies every weight across to C++ and back
    (1.9 s of a 4B language model's 0.4 GB block, 0.2 s this way)."""
    shaped = onnx.shape_inference.infer_shapes(skeleton(model), data_prop=data_prop).graph
    for field in ("input", "output", "value_info"):
        mine = getattr(model.graph, field)
        del mine[:]
        mine.extend(getattr(shaped, field))
    return model


WEIGHT_STUB_ELEMENTS = 1 << 16  # a graph-only pass may read biases and scalars, not weights


def _copy_fields(src, dst, skip: str) -> None:
    """Every field of protobuf message ``src`` set on ``dst`` but ``skip``."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if isinstance(value, str | bytes | int | float):
            setattr(dst, field.name, value)
        elif hasattr(value, "extend"):  # a repeated field
            getattr(dst, field.name).extend(value)
        else:
            getattr(dst, field.name).CopyFrom(value)


def _is_stub(tensor: onnx.TensorProto) -> bool:
    return not any(f.name.endswith("_data") for f, _ in tensor.ListFields())


def on_weightless(fn: Callable[[onnx.ModelProto], onnx.ModelProto]
                  ) -> Callable[[onnx.ModelProto], onnx.ModelProto]:
    """Run a graph-only pass (it rewires nodes, reads scalars, biases and shape constants,
    never a weight's values) on the model with its large initializers' payloads left out,
    and put them back after: the pass stops costing two copies and a comparison of every
    weight (0.6 s a pass on a VGG's 575 MB). The input is never modified; when the pass
    changes nothing it is returned as is. The wrapped pass is pure (``library_passes.PURE``
    semantics)."""

    @functools.wraps(fn)
    def run(model: onnx.ModelProto) -> onnx.ModelProto:
        light = onnx.ModelProto()
        _copy_fields(model, light, skip="graph")
        graph = light.graph
        _copy_fields(model.graph, graph, skip="initializer")
        weights = {}
        for init in model.graph.initializer:
            if math.prod(init.dims) <= WEIGHT_STUB_ELEMENTS:
                graph.initializer.append(init)
            else:
                weights[init.name] = init
                stub = graph.initializer.add()
                stub.name, stub.data_type = init.name, init.data_type
                stub.dims.extend(init.dims)
        before = light.SerializeToString()
        out = fn(light)
        if out.SerializeToString() == before:
            return model
        for init in out.graph.initializer:
            if init.name in weights and _is_stub(init):
                init.CopyFrom(weights[init.name])
        return out

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


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
