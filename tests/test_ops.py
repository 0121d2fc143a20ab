"""Op specs: MACs and element counts against hand-computed values; constraint checks."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from ops.activation import OPS_PER_ELEMENT
from ops.load import from_onnx
from ops.quant import node_precision
from ops.registry import spec_for, work_of
from ops.support import check_node
from ops.work import ARRAY, FREE, MEMORY, VECTOR
from tests.onnx_builders import conv, one_node


def _work(graph):
    return work_of(graph.nodes[0], graph)


@pytest.mark.parametrize(("args", "macs", "gemm"), [
    # 3x3, 64->128, 56x56 same padding: 56*56*128*64*9
    (dict(c=64, h=56, n=128, k=3, pad=1), 56 * 56 * 128 * 64 * 9, (3136, 576, 128, 1)),
    # strided 3x3 s2 on 57 rows without padding -> 28x28 outputs
    (dict(c=32, h=57, n=64, k=3, stride=2), 28 * 28 * 64 * 32 * 9, (784, 288, 64, 1)),
    # depthwise 3x3 on 96 channels, 28x28 out
    (dict(c=96, h=28, n=96, k=3, pad=1, group=96), 28 * 28 * 96 * 9, (784, 9, 1, 96)),
    # grouped 4 groups, 1x1, 64->64: each output sees 16 inputs
    (dict(c=64, h=8, n=64, k=1, group=4), 8 * 8 * 64 * 16, (64, 16, 16, 4)),
    # dilation 2 enlarges the window to 5x5 but MACs stay 3x3 per output
    (dict(c=8, h=20, n=8, k=3, dilation=2), 16 * 16 * 8 * 8 * 9, (256, 72, 8, 1)),
])
def test_conv_macs_and_gemm_lowering(args, macs, gemm):
    work = _work(conv(**args))
    assert work.unit == ARRAY and work.macs == macs
    assert (work.gemm.m, work.gemm.k, work.gemm.n, work.gemm.groups) == gemm


def test_conv_transpose_scatters_each_input_pixel():
    w = np.zeros((16, 8, 4, 4), np.float32)  # (C_in, C_out, kh, kw)
    g = one_node("ConvTranspose", {"x": [1, 16, 10, 10]}, [1, 8, 20, 20], {"w": w},
                 kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1])
    work = _work(g)
    assert work.macs == 10 * 10 * 16 * 8 * 16
    # run as a convolution over the 20x20 output: 2x2 of the 4x4 taps land on each pixel
    assert (work.gemm.m, work.gemm.k, work.gemm.n) == (20 * 20, 16 * 2 * 2, 8)
    assert work.gemm.macs == work.macs


def test_gemm_with_transposed_weights():
    g = one_node("Gemm", {"x": [4, 1280]}, [4, 1000],
                 {"w": np.zeros((1000, 1280), np.float32), "b": np.zeros(1000, np.float32)},
                 transB=1)
    work = _work(g)
    assert work.macs == 4 * 1280 * 1000 and work.weight_elems == 1280 * 1000 + 1000


def test_batched_matmul_heads_are_groups_and_shared_weights_fold_into_m():
    heads = one_node("MatMul", {"q": [1, 12, 128, 64], "k": [1, 12, 64, 128]},
                     [1, 12, 128, 128])
    work = _work(heads)
    assert work.macs == 12 * 128 * 64 * 128 and work.gemm.groups == 12
    proj = one_node("MatMul", {"x": [1, 128, 768]}, [1, 128, 768],
                    {"w": np.zeros((768, 768), np.float32)})
    work = _work(proj)
    assert (work.gemm.m, work.gemm.groups) == (128, 1) and work.weight_elems == 768 * 768


def test_vector_families_count_operations_per_element():
    x = {"x": [1, 16, 8, 8]}
    assert _work(one_node("Relu", x, [1, 16, 8, 8])).vector_ops == 1024
    pool = one_node("MaxPool", x, [1, 16, 4, 4], kernel_shape=[2, 2], strides=[2, 2])
    assert _work(pool).vector_ops == 16 * 4 * 4 * 4
    gap = one_node("GlobalAveragePool", x, [1, 16, 1, 1])
    assert _work(gap).vector_ops == 1024
    add = one_node("Add", {"a": [1, 16, 8, 8], "b": [1, 16, 1, 1]}, [1, 16, 8, 8])
    assert _work(add).vector_ops == 1024 and _work(add).input_elems == 1024 + 16
    ln = one_node("LayerNormalization", {"x": [1, 4, 32]}, [1, 4, 32],
                  {"g": np.ones(32, np.float32), "b": np.zeros(32, np.float32)}, axis=-1)
    assert _work(ln).unit == VECTOR and _work(ln).vector_ops == 8 * 128
    red = one_node("ReduceMean", x, [1, 16, 1, 1], axes=[2, 3])
    assert _work(red).vector_ops == 1024


def _definition_ops(op: str) -> int | None:
    """Operations per element of ``op`` evaluated as ONNX defines it (its schema's
    function body, ``onnx.defs``): each node that touches the data costs what npuflow
    charges that op on its own (1 for plain arithmetic, a comparison, a select or a
    reduction step); nodes that only shape constants cost nothing. None: no body."""
    schema = onnx.defs.get_schema(op)
    if schema.has_function:
        body = schema.function_body
    elif schema.has_context_dependent_function:
        inputs = ["x", *(f"bound{i}" for i in range(1, min(schema.max_input, 3)))]
        node = helper.make_node(op, inputs, ["y"])
        typ = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [2, 8]).SerializeToString()
        body = onnx.FunctionProto()
        body.ParseFromString(schema.get_context_dependent_function(
            node.SerializeToString(), [typ] * len(inputs)))
    else:
        return None
    data = set(body.input[:1])
    total = 0
    for n in body.node:
        if not data.intersection(n.input) or n.op_type in ("CastLike", "Shape", "Cast"):
            continue
        data.update(n.output)
        total += OPS_PER_ELEMENT.get(n.op_type, 1) if n.op_type != op else 1
    return total


def test_no_activation_costs_more_than_evaluating_its_onnx_definition():
    """The per-element table (ops/activation.py) against an independent source, the ONNX
    standard's own definitions: a fused activation never costs more than its definition
    evaluated op by op (Softplus = Exp, Add, Log; Softmax = ReduceMax, Sub, Exp, ReduceSum,
    Div; Mish = Softplus, Tanh, Mul); a lookup table may make it cheaper."""
    defined = {op: _definition_ops(op) for op in OPS_PER_ELEMENT if onnx.defs.has(op)}
    bodies = {op: n for op, n in defined.items() if n is not None}
    assert {"Softmax", "LogSoftmax", "Softplus", "Mish", "HardSwish", "Gelu"} <= set(bodies)
    over = {op: (OPS_PER_ELEMENT[op], n) for op, n in bodies.items()
            if OPS_PER_ELEMENT[op] > n}
    assert not over, f"charged more than the definition (table, definition): {over}"


def test_resize_nearest_copies_linear_interpolates():
    scales = {"roi": np.zeros(0, np.float32), "s": np.array([1, 1, 2, 2], np.float32)}
    g = one_node("Resize", {"x": [1, 4, 8, 8]}, [1, 4, 16, 16], scales, mode="nearest")
    assert _work(g).vector_ops == 1024
    g = one_node("Resize", {"x": [1, 4, 8, 8]}, [1, 4, 16, 16], scales, mode="linear")
    assert _work(g).vector_ops == 7 * 1024


def test_views_are_free_and_copies_move_every_element():
    shape = np.array([1, 1024], np.int64)
    view = one_node("Reshape", {"x": [1, 16, 8, 8]}, [1, 1024], {"s": shape})
    assert _work(view).unit == FREE
    tr = one_node("Transpose", {"x": [1, 16, 8, 8]}, [1, 8, 8, 16], perm=[0, 2, 3, 1])
    assert _work(tr).unit == MEMORY and _work(tr).output_elems == 1024


def test_unknown_op_is_kept_marked_and_falls_back_with_a_reason():
    node = helper.make_node("FancyOp", ["x"], ["y"], name="fancy", domain="vendor")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [1, 8])],
                              [helper.make_tensor_value_info("y", 1, [1, 8])])
    g = from_onnx(helper.make_model(graph), infer=False)
    assert not spec_for(g.nodes[0]).known
    assert _work(g).vector_ops == 8
    ok, checks = check_node(g.nodes[0], g, {"FancyOp": {}})
    assert not ok and "custom domain 'vendor'" in checks[0].detail


def test_constraint_checks_pass_and_fail_with_the_rule_text():
    g = conv(c=48, h=16, n=32, k=5, stride=2)
    ok, checks = check_node(g.nodes[0], g, {"Conv": {"kernel_max": 3, "stride_max": 2,
                                                     "channel_multiple": 16}})
    by_rule = {c.rule: c for c in checks}
    assert not ok
    assert not by_rule["kernel_size"].passed
    assert by_rule["kernel_size"].text == "Kernel height and width must be at most 3"
    assert by_rule["kernel_size"].detail == "kernel 5x5"
    assert by_rule["stride"].passed and by_rule["channel_multiple"].passed
    ok, checks = check_node(g.nodes[0], g, {})
    assert not ok and checks[0].rule == "supported_op" and "not in list" in checks[0].detail


def test_depthwise_rule_only_fires_on_depthwise():
    dw = conv(c=32, h=8, n=32, k=3, pad=1, group=32)
    std = conv(c=32, h=8, n=32, k=3, pad=1)
    table = {"Conv": {"depthwise": False}}
    assert not check_node(dw.nodes[0], dw, table)[0]
    assert check_node(std.nodes[0], std, table)[0]


def test_qdq_model_from_onnxruntime_folds_into_int8_tensors(tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["c"], name="conv_0", kernel_shape=[3, 3])
    relu = helper.make_node("Relu", ["c"], ["y"], name="relu_0")
    graph = helper.make_graph([node, relu], "q", [helper.make_tensor_value_info("x", 1,
                                                                                [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", 1, [1, 8, 6, 6])],
                              [onnx.numpy_helper.from_array(w, "w")])
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter([{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self):
            return next(self.items, None)

    quantize_static(str(src), str(dst), Reader(), activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    raw = from_onnx(onnx.load(dst), fold=False)
    assert any(n.op_type == "QuantizeLinear" for n in raw.nodes)
    folded = from_onnx(onnx.load(dst))
    ops = [n.op_type for n in folded.nodes]
    assert "QuantizeLinear" not in ops and "DequantizeLinear" not in ops and "Conv" in ops
    conv_node = next(n for n in folded.nodes if n.op_type == "Conv")
    weight = folded.tensors[conv_node.inputs[1]]
    assert weight.is_const and weight.precision == "int8" and weight.scale is not None
    assert node_precision(conv_node, folded) == "int8"
    assert work_of(conv_node, folded).macs == 6 * 6 * 8 * 27


def test_a_spec_that_fails_on_a_shaped_node_raises_naming_it(monkeypatch):
    """A spec's bug is never passed off as an unknown op: on a node whose shapes are all
    known it raises with the node and op named; a node with a dynamic dim is estimated."""
    import dataclasses

    from ops import registry

    def broken(node, graph):
        raise KeyError("alpha")

    monkeypatch.setitem(registry.SPECS, "Relu",
                        dataclasses.replace(registry.SPECS["Relu"], work=broken))
    graph = one_node("Relu", {"x": [1, 8]}, [1, 8])
    with pytest.raises(registry.OpSpecError, match=r"node 'relu_0' \(Relu\).*KeyError"):
        work_of(graph.nodes[0], graph)
    dynamic = one_node("Relu", {"x": ["n", 8]}, ["n", 8])
    assert not work_of(dynamic.nodes[0], dynamic).macs  # estimated, not raised
