"""onnxslim in linear time on long graphs: two of its steps are quadratic in graph size.

Profiled with cProfile on a 1,600-block residual chain (6,400 nodes): onnxslim took 139 s
of the 142 s optimize stage, of which
- weight tying 73 s: ``find_and_remove_replaceable_constants`` compares every pair of
  same-shape constants (1.3 M comparisons per shape on that chain);
- graph fusion 46 s: ``Graph.layer`` collects every tensor name of the graph for each fused
  node, to make up unique names, though the fusion hands it tensors and a node name and
  needs none.

``linear_slim()`` scopes two replacements to one slim call (onnxslim 0.1.x internals, so a
test runs each against the library's own function on graphs with duplicate and distinct
constants). Tying first groups the constants by value (dtype, shape, bytes; -0.0 counted
as 0.0, as ``np.array_equal`` does) and then runs onnxslim's own function inside each
group: the same constants are kept and the same references rewired, with comparisons only
between constants that can be equal. ``layer`` skips the name collection when it has nothing
to name and otherwise is onnxslim's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np


def _value_key(constant) -> tuple:
    from onnxslim.third_party.onnx_graphsurgeon.ir.tensor import LazyValues

    raw = constant._values  # read without materializing: export keeps lazy tensors as given
    values = raw.load() if isinstance(raw, LazyValues) else np.asarray(raw)
    if values.dtype.kind in "fc":
        values = values + values.dtype.type(0)  # -0.0 + 0 == +0.0
    return values.dtype.str, values.shape, values.tobytes()


def _grouped_tying(original):
    def tie(constant_tensors: list) -> None:
        groups: dict[tuple, list] = {}
        for tensor in constant_tensors:
            groups.setdefault(_value_key(tensor), []).append(tensor)
        for group in groups.values():
            if len(group) > 1:
                original(group)
    return tie


def _layer_without_names(original):
    from onnxslim.third_party.onnx_graphsurgeon.ir.node import Node
    from onnxslim.third_party.onnx_graphsurgeon.ir.tensor import Tensor

    def layer(self, inputs=None, outputs=None, *args, **kwargs):
        inputs, outputs = list(inputs or []), list(outputs or [])
        if "name" not in kwargs or not all(isinstance(t, Tensor) for t in [*inputs, *outputs]):
            return original(self, inputs, outputs, *args, **kwargs)
        node = Node(*args, **kwargs, inputs=inputs, outputs=outputs)
        self.nodes.append(node)
        return node.outputs
    return layer


@contextlib.contextmanager
def linear_slim() -> Iterator[None]:
    from onnxslim.core.optimization import weight_tying
    from onnxslim.third_party.onnx_graphsurgeon.ir.graph import Graph

    tying, layer = weight_tying.find_and_remove_replaceable_constants, Graph.layer
    weight_tying.find_and_remove_replaceable_constants = _grouped_tying(tying)
    Graph.layer = _layer_without_names(layer)
    try:
        yield
    finally:
        weight_tying.find_and_remove_replaceable_constants, Graph.layer = tying, layer
