"""An ONNX model as the compiler reads it: the IR (``ops.graph``) with Q/DQ pairs folded
into tensor precisions (``ops.quant``) and input NHWC -> NCHW Transposes into the graph's
``io_layout`` (``ops.io_layout``). Its own module because both folds build on the IR:
``ops.graph`` importing them back would be a cycle."""

from __future__ import annotations

import onnx

from ops.graph import Graph, read_onnx
from ops.io_layout import fold_input_transposes
from ops.quant import fold_qdq


def from_onnx(model: onnx.ModelProto, infer: bool = True, fold: bool = True) -> Graph:
    """The IR of ``model``, folded unless ``fold=False``."""
    graph = read_onnx(model, infer)
    return fold_input_transposes(fold_qdq(graph)) if fold else graph
