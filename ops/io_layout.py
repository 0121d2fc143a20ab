"""An input Transpose from NHWC to NCHW (what TensorFlow exporters put first) is the
application's layout, not work: the NPU is handed the NHWC tensor, as Vela is handed the
TFLite file's and RKNN folds the Transpose into its input format. Folding it gives the graph
the form a converted TFLite file has (``pipeline.exporters.tflite_onnx``): NCHW views of
the inputs and ``io_layout`` NHWC, so the compiler charges a layout conversion at the edge
only where the NPU's own layout differs. The exporters' matching NCHW -> NHWC Transposes
before the outputs go with them: the application reads NHWC, as from the TFLite file."""

from __future__ import annotations

from dataclasses import replace

from ops.graph import Graph

NHWC_TO_NCHW = [0, 3, 1, 2]
NCHW_TO_NHWC = [0, 2, 3, 1]


def fold_input_transposes(graph: Graph) -> Graph:
    """Every rank-4 graph input read only by one NHWC -> NCHW Transpose: the Transpose goes
    and its output becomes the input. All or nothing: ``io_layout`` is the graph's."""
    if graph.io_layout != "NCHW":
        return graph
    consumers = graph.consumers()
    folds = {}
    for name in graph.inputs:
        shape = graph.tensors[name].shape
        if shape is None or len(shape) != 4:
            continue
        readers = consumers.get(name, [])
        if len(readers) != 1 or readers[0].op_type != "Transpose" or \
                list(readers[0].attrs.get("perm") or []) != NHWC_TO_NCHW:
            return graph
        folds[name] = readers[0]
    if not folds:
        return graph
    gone = {node.name for node in folds.values()}
    inputs = [folds[name].outputs[0] if name in folds else name for name in graph.inputs]
    outputs = _output_transposes(graph)
    gone |= {node.name for node in outputs.values()}
    return replace(graph, nodes=[n for n in graph.nodes if n.name not in gone], inputs=inputs,
                   outputs=[outputs[name].inputs[0] if name in outputs else name
                            for name in graph.outputs],
                   io_layout="NHWC")


def _output_transposes(graph: Graph) -> dict:
    """Every rank-4 graph output written by an NCHW -> NHWC Transpose of a tensor nothing
    else reads, by output name; none unless all of them are (all or nothing)."""
    producers, consumers = graph.producers(), graph.consumers()
    folds = {}
    for name in graph.outputs:
        shape = graph.tensors[name].shape
        if shape is None or len(shape) != 4:
            continue
        node = producers.get(name)
        if node is None or node.op_type != "Transpose" or \
                list(node.attrs.get("perm") or []) != NCHW_TO_NHWC or \
                len(consumers.get(node.inputs[0], [])) != 1 or node.inputs[0] in graph.outputs:
            return {}
        folds[name] = node
    return folds
