"""Tiny ONNX graphs for unit tests: one node, static shapes, zero weights."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ops.graph import Graph
from ops.load import from_onnx


def one_node(op: str, inputs: dict[str, list[int]], output: list[int],
             consts: dict[str, np.ndarray] | None = None, **attrs) -> Graph:
    consts = consts or {}
    names = [*inputs, *consts]
    node = helper.make_node(op, names, ["y"], name=f"{op.lower()}_0", **attrs)
    graph = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(n, 1, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", 1, output)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return from_onnx(model)


def conv(c: int, h: int, n: int, k: int, stride: int = 1, pad: int = 0, group: int = 1,
         dilation: int = 1) -> Graph:
    out = (h + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    w = np.zeros((n, c // group, k, k), np.float32)
    return one_node("Conv", {"x": [1, c, h, h]}, [1, n, out, out], {"w": w},
                    kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                    group=group, dilations=[dilation, dilation])


def if_model(path) -> None:
    """A graph whose output depends on a data-dependent If (the control flow a static NPU
    plan cannot cost): relu(x) if sum(x) > 0 else sigmoid(x)."""
    import onnx
    from onnx import TensorProto

    def branch(op: str, out: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], [out])], op.lower(), [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4])])

    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum_1"),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="greater_1"),
             helper.make_node("If", ["c"], ["y"], name="branch_1",
                              then_branch=branch("Relu", "t"),
                              else_branch=branch("Sigmoid", "e"))]
    graph = helper.make_graph(
        nodes, "if_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
