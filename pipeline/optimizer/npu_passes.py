"""NPU-minded graph passes no library does, each a small function: model -> model.

- ``fold_shape_chains``: Reshape / Flatten / Squeeze / Unsqueeze chains collapse into one
  Reshape (or none, when the chain restores the input's shape): an NPU compiler then sees
  one view instead of a string of copies it might not support.
- ``flatten_gemm_bias``: (1, N) Gemm biases become (N,).
- ``remove_noops``: identity Transposes, Casts to the same type, Identity, inference-mode
  Dropout, Reshapes to the same shape, one-input Sums; a two-input Sum (old exporters'
  residual add) becomes the Add it is, the op NPU support lists name.
- ``pad_channels`` (``optimize.pad_channels_to``): Conv output channels padded to the NPU's
  multiple with zero filters, consumed by zero weights or sliced away.
- ``fuse_gelu`` / ``fuse_silu``: the exporter patterns ``0.5*x*(1+erf(x/sqrt2))`` and
  ``x*sigmoid(x)`` become one op, so placement checks one op against the support list
  instead of five. Where the model's opset has the op (Gelu from opset 20) the subgraph is
  replaced; otherwise its nodes are annotated (``doc_string = "npuflow.pattern=Gelu"``) and
  compile's fusion recognises them.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pipeline.optimizer.graph_edit import (
    bypass,
    consumers,
    opset,
    producers,
    skeleton,
    static_shapes,
)

SHAPE_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
PATTERN_TAG = "npuflow.pattern="


def _const_value(graph: onnx.GraphProto, name: str) -> np.ndarray | None:
    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            return numpy_helper.to_array(node.attribute[0].t)
    return None


def _is_scalar(graph: onnx.GraphProto, name: str, value: float) -> bool:
    v = _const_value(graph, name)
    return v is not None and v.size == 1 and math.isclose(float(v.reshape(())), value,
                                                          rel_tol=1e-3)


def fold_shape_chains(model: onnx.ModelProto) -> onnx.ModelProto:
    """Chains of Reshape / Flatten / Squeeze / Unsqueeze collapsed into one reshape to the
    final static shape (or removed when it is the input's shape)."""
    g = model.graph
    changed = True
    while changed:
        changed = False
        shapes = static_shapes(model)
        prod, cons = producers(g), consumers(g)
        outputs = {o.name for o in g.output}
        for node in list(g.node):
            first = prod.get(node.input[0]) if node.input else None
            if node.op_type not in SHAPE_OPS or first is None or first.op_type not in SHAPE_OPS:
                continue
            if len(cons.get(first.output[0], [])) != 1 or first.output[0] in outputs:
                continue
            target = shapes.get(node.output[0])
            if target is None:
                continue
            source = first.input[0]
            if shapes.get(source) == target:
                g.node.remove(first)
                bypass(g, node, source)
            else:
                name = f"{node.name or node.output[0]}_shape"
                g.initializer.append(numpy_helper.from_array(np.array(target, np.int64), name))
                merged = helper.make_node("Reshape", [source, name], list(node.output),
                                          name=node.name or f"reshape_{node.output[0]}")
                index = list(g.node).index(first)
                g.node.remove(first)
                g.node.remove(node)
                g.node.insert(index, merged)
            changed = True
            break
    return model


def remove_noops(model: onnx.ModelProto) -> onnx.ModelProto:
    """No-ops removed: Identity, inference Dropout, identity Transpose, Cast to the same
    type, Reshape to the same shape, one-input Sum (a two-input Sum becomes an Add)."""
    g = model.graph
    shapes = static_shapes(model)
    inferred = onnx.shape_inference.infer_shapes(skeleton(model)).graph
    dtypes = {vi.name: vi.type.tensor_type.elem_type
              for vi in [*inferred.input, *inferred.value_info, *inferred.output]}
    for init in g.initializer:
        dtypes[init.name] = init.data_type
    for node in list(g.node):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        src = node.input[0] if node.input else ""
        noop = (
            node.op_type == "Identity"
            or (node.op_type == "Dropout" and len([o for o in node.output if o]) == 1)
            or (node.op_type == "Transpose" and list(attrs.get("perm", [])) ==
                list(range(len(attrs.get("perm", [])))) and attrs.get("perm"))
            or (node.op_type == "Cast" and dtypes.get(src) == attrs.get("to"))
            or (node.op_type == "Reshape" and shapes.get(src) is not None
                and shapes.get(src) == shapes.get(node.output[0]))
            or (node.op_type == "Sum" and len(node.input) == 1)
        )
        if noop:
            bypass(g, node, src)
        elif node.op_type == "Sum" and len(node.input) == 2:
            node.op_type = "Add"
    return model


def flatten_gemm_bias(model: onnx.ModelProto) -> onnx.ModelProto:
    """Gemm biases of shape (1, N) -> (N,): MatMul+Add -> Gemm rewrites leave them 2-D,
    which per-channel bias quantization (and NPU compilers) cannot take."""
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    for node in g.node:
        if node.op_type != "Gemm" or len(node.input) < 3 or node.input[2] not in inits:
            continue
        bias = inits[node.input[2]]
        if len(bias.dims) == 2 and bias.dims[0] == 1:
            users = [n for n in g.node if bias.name in n.input]
            if len(users) == 1:
                flat = numpy_helper.to_array(bias).reshape(-1)
                bias.CopyFrom(numpy_helper.from_array(flat, bias.name))
    return model


def _match_gelu(g: onnx.GraphProto, div: onnx.NodeProto,
                cons: dict[str, list[onnx.NodeProto]]) -> list[onnx.NodeProto] | None:
    if div.op_type != "Div" or not _is_scalar(g, div.input[1], math.sqrt(2.0)):
        return None
    x, chain = div.input[0], [div]
    for op in ("Erf", "Add", "Mul", "Mul"):
        users = cons.get(chain[-1].output[0], [])
        if len(users) != 1 or users[0].op_type != op:
            return None
        chain.append(users[0])
    add, mul_a, mul_b = chain[2], chain[3], chain[4]
    one = next((i for i in add.input if i != chain[1].output[0]), "")
    other_a = next((i for i in mul_a.input if i != add.output[0]), "")
    other_b = next((i for i in mul_b.input if i != mul_a.output[0]), "")
    halves = {other_a, other_b} - {x}
    if not _is_scalar(g, one, 1.0) or x not in (other_a, other_b) or len(halves) != 1 or \
            not _is_scalar(g, halves.pop(), 0.5):
        return None
    return chain


def _match_silu(sig: onnx.NodeProto, cons: dict[str, list[onnx.NodeProto]]
                ) -> list[onnx.NodeProto] | None:
    if sig.op_type != "Sigmoid":
        return None
    users = cons.get(sig.output[0], [])
    if len(users) == 1 and users[0].op_type == "Mul" and sig.input[0] in users[0].input:
        return [sig, users[0]]
    return None


def _has_op(op: str, version: int) -> bool:
    try:
        onnx.defs.get_schema(op, version)
        return True
    except onnx.defs.SchemaError:
        return False


def _fuse(model: onnx.ModelProto, op: str, match) -> onnx.ModelProto:
    g = model.graph
    replace = _has_op(op, opset(model))
    done: set[str] = set()
    cons = consumers(g)  # rebuilt only when a fusion rewires the graph: O(n), not O(n^2)
    for node in list(g.node):
        chain = match(node, cons)
        if not chain or any(n.output[0] in done for n in chain):
            continue
        done.update(n.output[0] for n in chain)
        if replace:
            index = list(g.node).index(chain[0])
            fused = helper.make_node(op, [chain[0].input[0]], [chain[-1].output[0]],
                                     name=chain[0].name or f"{op.lower()}_{index}")
            for n in chain:
                g.node.remove(n)
            g.node.insert(index, fused)
            cons = consumers(g)
        else:
            for n in chain:
                n.doc_string = f"{PATTERN_TAG}{op}"
    return model


def fuse_gelu(model: onnx.ModelProto) -> onnx.ModelProto:
    """The erf and tanh GELU subgraphs fused into one Gelu (opset 20+) node."""
    return _fuse(model, "Gelu", lambda n, cons: _match_gelu(model.graph, n, cons))


def fuse_silu(model: onnx.ModelProto) -> onnx.ModelProto:
    """x * Sigmoid(x) fused into one Swish (SiLU) node."""
    return _fuse(model, "Swish", _match_silu)


def count_patterns(model: onnx.ModelProto) -> dict[str, int]:
    """Fused ops plus annotated pattern subgraphs, by op name."""
    counts: dict[str, int] = {}
    for n in model.graph.node:
        if n.op_type in ("Gelu", "Swish"):
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    tagged: dict[str, int] = {}
    for n in model.graph.node:
        if n.doc_string.startswith(PATTERN_TAG):
            op = n.doc_string[len(PATTERN_TAG):]
            tagged[op] = tagged.get(op, 0) + 1
    for op, nodes in tagged.items():
        counts[f"{op} (annotated)"] = nodes // (5 if op == "Gelu" else 2)
    return counts


UNARY_ELEMENTWISE = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid",
                               "HardSwish", "Elu", "Selu", "Softplus", "Gelu", "Swish"})


def pad_channels(model: onnx.ModelProto, multiple: int) -> onnx.ModelProto:
    """Pad Conv output channels to ``multiple`` (the NPU's channel alignment), keeping the
    function: the added filters are zero; if the next consumer is a Conv reached through
    unary elementwise ops only, its weights for the added input channels are zero too (so
    whatever the activations make of the zeros is multiplied away); otherwise a Slice right
    after the padded Conv cuts the extra channels off."""
    if multiple <= 1:
        return model
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    for conv in [n for n in g.node if n.op_type == "Conv"]:
        attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
        if attrs.get("group", 1) != 1 or conv.input[1] not in inits:
            continue
        weight = numpy_helper.to_array(inits[conv.input[1]])
        cout = weight.shape[0]
        pad = -cout % multiple
        if pad == 0:
            continue
        zeros = np.zeros((pad, *weight.shape[1:]), weight.dtype)
        inits[conv.input[1]].CopyFrom(numpy_helper.from_array(
            np.concatenate([weight, zeros]), conv.input[1]))
        if len(conv.input) > 2 and conv.input[2] in inits:
            bias = numpy_helper.to_array(inits[conv.input[2]])
            inits[conv.input[2]].CopyFrom(numpy_helper.from_array(
                np.concatenate([bias, np.zeros(pad, bias.dtype)]), conv.input[2]))
        cons = consumers(g)
        tensor, outputs = conv.output[0], {o.name for o in g.output}
        while len(cons.get(tensor, [])) == 1 and cons[tensor][0].op_type in UNARY_ELEMENTWISE \
                and tensor not in outputs:
            tensor = cons[tensor][0].output[0]
        users = cons.get(tensor, [])
        nxt = users[0] if len(users) == 1 else None
        if nxt is not None and tensor not in outputs and nxt.op_type == "Conv" and \
                nxt.input[0] == tensor and nxt.input[1] in inits and \
                {a.name: helper.get_attribute_value(a) for a in nxt.attribute}.get("group", 1) == 1:
            w2 = numpy_helper.to_array(inits[nxt.input[1]])
            extra = np.zeros((w2.shape[0], pad, *w2.shape[2:]), w2.dtype)
            inits[nxt.input[1]].CopyFrom(numpy_helper.from_array(
                np.concatenate([w2, extra], axis=1), nxt.input[1]))
        else:
            padded = f"{conv.output[0]}_padded"
            original = conv.output[0]
            conv.output[0] = padded
            names = [f"{original}_slice_{k}" for k in ("starts", "ends", "axes")]
            for name, value in zip(names, ([0], [cout], [1]), strict=True):
                g.initializer.append(numpy_helper.from_array(np.array(value, np.int64), name))
            index = list(g.node).index(conv)
            g.node.insert(index + 1, helper.make_node("Slice", [padded, *names], [original],
                                                      name=f"{conv.name or original}_unpad"))
        inits = {i.name: i for i in g.initializer}
    del g.value_info[:]
    return model
