"""An ONNX QOperator model (``QLinearConv``, ``QLinearMatMul``, onnxruntime's
``com.microsoft`` ``QLinear*`` ops) rewritten to the QDQ form the compiler reads, with the
same integers, scales and zero points.

``QLinearConv(x, sx, zx, w, sw, zw, sy, zy, B)`` computes ``Q(Conv(DQ(x), DQ(w), DQ(B)))``
with the bias's scale ``sx * sw`` (the ONNX specification); every QLinear op is that
pattern around its float op, so the rewrite is mechanical: DequantizeLinear on each
integer input, the float op with the QLinear op's attributes, QuantizeLinear writing the
integer output under its own name. onnxruntime ships no such converter (its tools go
float -> QDQ or float -> QOperator), hence this module. An op that takes integer tensors as
they are (MaxPool, Reshape, Transpose on int8) runs on their real values between a
DequantizeLinear and a QuantizeLinear at the same scale, as in onnxruntime's QDQ models.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnxruntime.quantization.quant_utils import QUANT_INPUT_SUFFIX

MS = "com.microsoft"
# op -> (float op, positions of (value, scale, zero point) inputs, output (scale, zp) positions)
PATTERNS: dict[str, tuple[str, list[tuple[int, int, int]], tuple[int, int] | None]] = {
    "QLinearConv": ("Conv", [(0, 1, 2), (3, 4, 5)], (6, 7)),
    "QLinearMatMul": ("MatMul", [(0, 1, 2), (3, 4, 5)], (6, 7)),
    "QLinearAdd": ("Add", [(0, 1, 2), (3, 4, 5)], (6, 7)),
    "QLinearMul": ("Mul", [(0, 1, 2), (3, 4, 5)], (6, 7)),
    "QLinearAveragePool": ("AveragePool", [(0, 1, 2)], (3, 4)),
    "QLinearGlobalAveragePool": ("GlobalAveragePool", [(0, 1, 2)], (3, 4)),
    "QLinearSigmoid": ("Sigmoid", [(0, 1, 2)], (3, 4)),
    "QLinearLeakyRelu": ("LeakyRelu", [(0, 1, 2)], (3, 4)),
    "QLinearSoftmax": ("Softmax", [(0, 1, 2)], (3, 4)),
    "QGemm": ("Gemm", [(0, 1, 2), (3, 4, 5)], (7, 8)),
}
DROPPED_ATTRS = {"channels_last", "opset"}  # the contrib ops' own; the float op has none


def has_qoperators(model: onnx.ModelProto) -> bool:
    return any(n.op_type in PATTERNS or n.op_type == "QLinearConcat" for n in model.graph.node)


class _Rewrite:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.inits = {i.name: i for i in model.graph.initializer}
        self.added: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        # integer activations -> (scale, zero point) names, and their shared real values
        self.params: dict[str, tuple[str, str]] = {}
        self.real: dict[str, str] = {}
        self.taken = {t for n in model.graph.node for t in (*n.input, *n.output)} | \
            {i.name for i in model.graph.input}

    def dq(self, value: str, scale: str, zero: str, name: str, axis: int | None = None) -> str:
        """The real values of an integer input: one shared DequantizeLinear per integer
        activation, one per reader for a constant (its scales come with the reader)."""
        if value in self.params:
            return self.shared(value)
        attrs = {"axis": axis} if axis is not None else {}
        out = f"{value}:dq:{name}"
        self.nodes.append(helper.make_node("DequantizeLinear", [value, scale, zero], [out],
                                           name=f"{name}/{value}/DequantizeLinear", **attrs))
        return out

    def shared(self, value: str) -> str:
        if value not in self.real:
            scale, zero = self.params[value]
            self.real[value] = self._real_name(value)
            self.nodes.append(helper.make_node("DequantizeLinear", [value, scale, zero],
                                               [self.real[value]],
                                               name=f"{value}/DequantizeLinear"))
        return self.real[value]

    def quantize(self, raw: str, scale: str, zero: str, output: str, name: str) -> None:
        """An op's integer output under its own name and type, from its float result.
        Readers get the real values from ``shared``, named as in the float model
        onnxruntime quantized (``c1`` for ``c1_quantized``), the float result being
        ``c1_QuantizeLinear_Input``: the per-layer error tools pair them with the float
        model's ``c1``."""
        self.nodes.append(helper.make_node("QuantizeLinear", [raw, scale, zero], [output],
                                           name=f"{name}/QuantizeLinear"))
        self.params[output] = (scale, zero)

    def _real_name(self, output: str) -> str:
        base = output.removesuffix("_quantized")
        return base if base != output and base not in self.taken else f"{output}:dq"

    def raw_name(self, output: str) -> str:
        return f"{self._real_name(output)}{QUANT_INPUT_SUFFIX}"

    def per_axis(self, scale: str) -> bool:
        init = self.inits.get(scale)
        return init is not None and numpy_helper.to_array(init).size > 1

    def bias(self, node: onnx.NodeProto, name: str) -> str:
        """QLinearConv's int32 bias at scale ``sx * sw``."""
        sx = numpy_helper.to_array(self.inits[node.input[1]]).astype(np.float32)
        sw = numpy_helper.to_array(self.inits[node.input[4]]).astype(np.float32)
        scale = (sx * sw).astype(np.float32)
        base = node.input[8]
        size = numpy_helper.to_array(self.inits[base]).size
        self.added += [numpy_helper.from_array(scale.reshape(-1) if scale.size > 1 else
                                               scale.reshape(()), f"{base}:scale"),
                       numpy_helper.from_array(np.zeros(size if scale.size > 1 else (),
                                                        np.int32), f"{base}:zero_point")]
        return self.dq(base, f"{base}:scale", f"{base}:zero_point", name,
                       0 if scale.size > 1 else None)

    def rewrite(self, node: onnx.NodeProto) -> None:
        name = node.name or node.output[0]
        if node.op_type == "QLinearConcat":  # (sy, zy, then (x, sx, zx) per input)
            args = [self.dq(node.input[i], node.input[i + 1], node.input[i + 2], name)
                    for i in range(2, len(node.input), 3)]
            raw = self.raw_name(node.output[0])
            self.nodes.append(helper.make_node("Concat", args, [raw], name=name,
                                               axis=_attr(node, "axis")))
            self.quantize(raw, node.input[0], node.input[1], node.output[0], name)
            return
        op, triples, out = PATTERNS[node.op_type]
        args = []
        for value, scale, zero in triples:
            axis = 0 if node.op_type == "QLinearConv" and value == 3 else None
            if node.op_type in ("QLinearMatMul", "QGemm") and value == 3 and \
                    self.per_axis(node.input[scale]):
                axis = 0 if node.op_type == "QGemm" and _attr(node, "transB") else 1
            if axis is not None and not self.per_axis(node.input[scale]):
                axis = None
            args.append(self.dq(node.input[value], node.input[scale], node.input[zero], name,
                                axis))
        if node.op_type == "QLinearConv" and len(node.input) > 8 and node.input[8]:
            args.append(self.bias(node, name))
        if node.op_type == "QGemm" and len(node.input) > 6 and node.input[6]:
            args.append(node.input[6])  # QGemm's C is already real-valued int32 * sa * sb
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
                 if a.name not in DROPPED_ATTRS}
        float_out = out is not None and len(node.input) > out[0] and node.input[out[0]]
        raw = self.raw_name(node.output[0]) if float_out else node.output[0]
        self.nodes.append(helper.make_node(op, args, [raw], name=name, **attrs))
        if float_out:
            self.quantize(raw, node.input[out[0]], node.input[out[1]], node.output[0], name)

    def through(self, node: onnx.NodeProto) -> None:
        """An op that reads integers as they are (MaxPool, Reshape, Transpose): the same op
        on their real values, its outputs quantized at its first integer input's scale
        (data movement keeps it), so the graph is QDQ throughout."""
        first = next(i for i in node.input if i in self.params)
        scale, zero = self.params[first]
        inputs = [self.shared(i) if i in self.params else i for i in node.input]
        raws = [self.raw_name(o) for o in node.output]
        self.nodes.append(helper.make_node(node.op_type, inputs, raws, name=node.name,
                                           domain=node.domain or None,
                                           **{a.name: helper.get_attribute_value(a)
                                              for a in node.attribute}))
        for raw, output in zip(raws, node.output, strict=True):
            self.quantize(raw, scale, zero, output, node.name or output)


def _attr(node: onnx.NodeProto, name: str) -> object:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), 0)


def to_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every QLinear op in QDQ form; unchanged when it has none. The integer
    tensors keep their names and types, the graph's inputs and outputs theirs."""
    if not has_qoperators(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rw = _Rewrite(out)
    for node in model.graph.node:
        if node.op_type in PATTERNS or node.op_type == "QLinearConcat":
            rw.rewrite(node)
        elif node.op_type == "QuantizeLinear":
            rw.nodes.append(node)
            rw.params[node.output[0]] = (node.input[1], node.input[2])
        elif node.op_type != "DequantizeLinear" and any(i in rw.params for i in node.input):
            rw.through(node)
        else:
            rw.nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(rw.nodes)
    out.graph.initializer.extend(rw.added)
    domains = {n.domain for n in out.graph.node}
    keep = [o for o in out.opset_import if o.domain in ("", "ai.onnx") or o.domain in domains]
    del out.opset_import[:]
    out.opset_import.extend(keep)
    return out
