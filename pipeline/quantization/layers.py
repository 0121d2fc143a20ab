"""Layers as quantization sees them: a compute node (Conv, Gemm, MatMul) and the
non-compute nodes that follow it up to the next compute node (its activation, however the
exporter decomposed it: HardSwish as Add, Clip, Mul, Div; a residual Add; a reshape).
That is the unit an NPU compiler fuses into one kernel, the unit every per-layer figure is
reported for, the unit quantized alone in the isolated runs and the unit automatic mixed
precision keeps float. Keeping only the compute node float would leave its activation's
intermediate tensors quantized, and change little or nothing: onnxruntime's QDQ quantizer
still quantizes every tensor a quantized neighbour reads. Nodes before the first compute
node form a layer of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnxruntime.quantization.quant_utils import QUANT_INPUT_SUFFIX

from pipeline.quantization.schemes import COMPUTE_OPS


@dataclass(frozen=True)
class Layer:
    name: str  # the anchor (compute) node's name: what quant.keep_float takes
    nodes: tuple[str, ...]
    op: str  # the anchor's op, then the ops that joined it: "Conv (+Add, Clip, Mul, Div)"
    tensor: str  # the float tensor whose quantized value is compared (the layer's output)

    @property
    def is_compute(self) -> bool:
        """Anchored on a compute node (not the nodes before the first one)."""
        return self.op.split()[0] in COMPUTE_OPS


def quantized_tensors(qdq: onnx.ModelProto) -> set[str]:
    """Float tensors the QDQ model quantizes: the inputs of its QuantizeLinear nodes, and
    the graph outputs its DequantizeLinear nodes produce (onnxruntime renames a quantized
    graph output's producer side and keeps the name for the dequantized value)."""
    outputs = {o.name for o in qdq.graph.output}
    return {n.input[0].removesuffix(QUANT_INPUT_SUFFIX) for n in qdq.graph.node
            if n.op_type == "QuantizeLinear"} | {
        n.output[0] for n in qdq.graph.node
        if n.op_type == "DequantizeLinear" and n.output[0] in outputs}


def _describe(chain: list[onnx.NodeProto]) -> str:
    rest = list(dict.fromkeys(n.op_type for n in chain[1:]))
    return chain[0].op_type + (f" (+{', '.join(rest)})" if rest else "")


def layers(model: onnx.ModelProto, quantized: set[str]) -> list[Layer]:
    """The float model's layers in graph order (``model`` is topologically sorted, as
    ONNX requires). ``quantized``: tensors the fully quantized model quantizes; a layer's
    compared tensor is its last quantized output (its anchor's output if none is)."""
    owner: dict[str, int] = {}  # tensor -> index of the layer whose node produced it
    chains: list[list[onnx.NodeProto]] = []
    for node in model.graph.node:
        joined = next((owner[i] for i in node.input if i in owner), None)
        if node.op_type in COMPUTE_OPS or joined is None:
            chains.append([node])
            joined = len(chains) - 1
        else:
            chains[joined].append(node)
        owner.update({o: joined for o in node.output if o})
    out = []
    for chain in chains:
        outputs = [o for n in chain for o in n.output if o in quantized]
        tensor = outputs[-1] if outputs else chain[0].output[0]
        out.append(Layer(chain[0].name, tuple(n.name for n in chain), _describe(chain), tensor))
    return out


def post_qdq(qdq: onnx.ModelProto, tensor: str) -> str | None:
    """The name of ``tensor``'s value after its QuantizeLinear -> DequantizeLinear pair in
    ``qdq`` (what the next layer reads), or None if it is not quantized there."""
    q_out = next((n.output[0] for n in qdq.graph.node
                  if n.op_type == "QuantizeLinear" and n.input[0] == tensor), None)
    return next((n.output[0] for n in qdq.graph.node
                 if n.op_type == "DequantizeLinear" and n.input[0] == q_out), None)


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also returns ``names`` (float tensors, any shape)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {o.name for o in copy.graph.output}
    copy.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                             for n in names if n not in present)
    return copy
