"""A TFLite graph as ONNX, with the file's own quantization kept exactly.

Each quantized tensor ``T`` of the file becomes the QDQ form onnxruntime's quantizer writes:
its producer's float result (``T_QuantizeLinear_Input``), ``QuantizeLinear`` with ``T``'s
scale and zero point into ``T:q`` (the file's integers), ``DequantizeLinear`` back to ``T``,
the real values every consumer reads. Weights and biases are stored as the file's integers
(``W``, with every per-channel scale on its axis) behind a ``DequantizeLinear``. Fused
activations become the
ONNX op between the producer and its ``QuantizeLinear``, as the integer kernel clamps before
it rounds. Ops keep the file's order and are named after the tensor they write, so a
kernel in npuflow's reports is the tensor Netron shows in the original file.

TFLite stores activations NHWC; ONNX's operators are NCHW. Rank-4 activations are stored
NCHW here and every layout-sensitive op maps its axes (concat, mean, pad, transpose,
softmax); constants broadcast against them are permuted; a reshape or fully connected layer
that flattens an NHWC tensor either reads it in NHWC order through a Transpose or, for a
fully connected layer, has its weight columns permuted instead (the same function, no
extra kernel). The graph's inputs and outputs are the NCHW views of the file's; the model's
metadata (``npuflow.io_layout=NHWC``) tells the compiler that the application hands the NPU
NHWC tensors, as it does with the file.

Written here rather than taken from a converter: see ``tflite_reader`` for why; the op
table is what embedded networks use (MLPerf Tiny's four, MobileNets, U-Nets); any other op
is one line naming it.

One file of ~500 lines: one small writer per TFLite op in one table, each reading the
same per-tensor quantization helpers; the table is the unit a reader checks against
LiteRT's op list.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ops.graph import IO_LAYOUT_KEY
from pipeline.errors import UserError
from pipeline.exporters.tflite_reader import Op, Tensor, TFLiteModel

TO_NCHW = (0, 3, 1, 2)  # an NHWC array -> NCHW
TO_NHWC = (0, 2, 3, 1)
NHWC_AXIS = {0: 0, 1: 2, 2: 3, 3: 1}  # an NHWC axis -> the same axis of the NCHW tensor
ACTIVATIONS = {0: None, 1: "Relu", 2: (-1.0, 1.0), 3: (0.0, 6.0), 4: "Tanh"}
QUANT_INPUT = "_QuantizeLinear_Input"  # onnxruntime.quantization.quant_utils.QUANT_INPUT_SUFFIX


def _onnx_type(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


class Converter:
    """One conversion: the nodes and initializers built so far, and for every TFLite tensor
    the ONNX name of its real values."""

    def __init__(self, model: TFLiteModel) -> None:
        self.m = model
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.names: dict[int | tuple[int, str], str] = {}
        self.opset = 21 if any(t.quant and t.dtype in (np.int16, np.uint16)
                               for t in model.tensors) else 17
        self._const = 0

    # -- tensors -------------------------------------------------------------------------
    def t(self, index: int) -> Tensor:
        return self.m.tensor(index)

    def rank4(self, index: int) -> bool:
        return len(self.t(index).shape) == 4

    def const(self, name: str, array: np.ndarray) -> str:
        # copy(order="C"): np.ascontiguousarray would make a scalar scale 1-d, and a
        # per-tensor QuantizeLinear needs a scalar
        self.inits.append(numpy_helper.from_array(np.array(array, order="C"), name))
        return name

    def fresh(self, base: str) -> str:
        self._const += 1
        return f"{base}:{self._const}"

    def node(self, op: str, inputs: list[str], output: str, name: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, **attrs))
        return output

    def weight(self, index: int, data: np.ndarray, axis: int, suffix: str = "") -> str:
        """A constant at its (possibly re-laid-out) ``data``: the file's integers behind a
        DequantizeLinear with its scales on ``axis``, or a float initializer (``suffix``
        tells a re-laid-out copy's name from the tensor's own)."""
        t = self.t(index)
        base = t.name + suffix
        if t.quant is None or not np.issubdtype(t.dtype, np.integer):
            return self.const(base, data.astype(np.float32)
                              if t.dtype in (np.float16, np.float64) else data)
        q = t.quant
        stored = data
        if t.dtype == np.int64:  # int16x8 biases: int32 where they fit, else real values
            if np.abs(data).max(initial=0) >= 2**31:
                return self.const(base, (data * q.scale.astype(np.float64)).astype(
                    np.float32))
            stored = data.astype(np.int32)
        self.const(base, stored)
        scale = q.scale if q.per_channel else q.scale.reshape(())
        zero = q.zero_point.astype(stored.dtype)
        zero = zero if q.per_channel else zero.reshape(())
        self.const(f"{base}:scale", scale.astype(np.float32))
        self.const(f"{base}:zero_point", zero)
        attrs = {"axis": axis} if q.per_channel else {}
        return self.node("DequantizeLinear", [base, f"{base}:scale", f"{base}:zero_point"],
                         f"{base}:dq", f"{base}/DequantizeLinear", **attrs)

    def value(self, index: int, like: int | None = None) -> str:
        """The real values of tensor ``index``. A constant broadcast against the rank-4
        activation ``like`` is given rank 4 (NHWC broadcasting) and laid out NCHW."""
        broadcast = (like is not None and self.rank4(like) and index not in self.names
                     and self.t(index).is_constant and self.t(index).data.ndim < 4)
        key = (index, "nchw") if broadcast else index
        if key in self.names:
            return self.names[key]
        t = self.t(index)
        if not t.is_constant:
            raise UserError(f"model.path: '{self.m.path}': tensor '{t.name}' is read before "
                            "any op writes it")
        data = t.data
        if broadcast:
            data = data.reshape((1,) * (4 - data.ndim) + data.shape)
        if data.ndim == 4:
            data = data.transpose(TO_NCHW)
        self.names[key] = self.weight(index, data, 0, suffix=":nchw" if broadcast else "")
        return self.names[key]

    def result(self, index: int) -> str:
        """The name an op writes tensor ``index``'s float result to: the tensor's own name,
        or ``T_QuantizeLinear_Input`` when ``finish`` quantizes it (onnxruntime's naming, which
        its per-layer error tools pair with the float model's ``T``)."""
        t = self.t(index)
        return f"{t.name}{QUANT_INPUT}" if self._quantized(t) else t.name

    @staticmethod
    def _quantized(t: Tensor) -> bool:
        return t.quant is not None and np.issubdtype(t.dtype, np.integer)

    def finish(self, index: int, raw: str) -> None:
        """Tensor ``index`` computed as ``raw``: quantized to the file's integers and
        dequantized for its readers, or used as is for a float tensor."""
        t = self.t(index)
        if not self._quantized(t):
            self.names[index] = raw
            return
        q = t.quant
        self.const(f"{t.name}:scale", q.scale.reshape(()).astype(np.float32))
        self.const(f"{t.name}:zero_point", q.zero_point.astype(t.dtype).reshape(()))
        args = [f"{t.name}:scale", f"{t.name}:zero_point"]
        self.node("QuantizeLinear", [raw, *args], f"{t.name}:q", f"{t.name}/QuantizeLinear")
        self.names[index] = self.node("DequantizeLinear", [f"{t.name}:q", *args], t.name,
                                      f"{t.name}/DequantizeLinear")

    def activation(self, code: int, x: str, out: str, name: str) -> str:
        """A fused activation between the producer's result and its quantization."""
        act = ACTIVATIONS.get(code)
        if code not in ACTIVATIONS:
            raise UserError(f"model.path: '{self.m.path}': op '{name}' has fused activation "
                            f"{code}, which npuflow does not convert")
        if act is None:
            return x
        if isinstance(act, str):
            return self.node(act, [x], out, f"{name}/{act}")
        low, high = (self.const(self.fresh(f"{name}/clip"), np.array(v, np.float32))
                     for v in act)
        return self.node("Clip", [x, low, high], out, f"{name}/Clip")

    def to_nhwc(self, x: str, index: int, name: str) -> str:
        """A rank-4 value in TFLite's element order, where that order differs."""
        _, h, w, c = self.t(index).shape
        if c == 1 or h * w == 1:
            return x
        return self.node("Transpose", [x], f"{x}:nhwc", f"{name}/ToNHWC", perm=list(TO_NHWC))

    def from_nhwc(self, x: str, shape: tuple[int, ...], name: str) -> str:
        """A value in TFLite order with a rank-4 ``shape`` (NHWC), laid out NCHW."""
        _, h, w, c = shape
        nchw = [shape[i] for i in TO_NCHW]
        if c == 1 or h * w == 1:
            return self.reshape(x, nchw, f"{name}/AsNCHW")
        y = self.reshape(x, list(shape), f"{name}/AsNHWC")
        return self.node("Transpose", [y], f"{name}:nchw", f"{name}/ToNCHW",
                         perm=list(TO_NCHW))

    def reshape(self, x: str, shape: list[int], name: str) -> str:
        target = self.const(self.fresh(f"{name}/shape"), np.array(shape, np.int64))
        return self.node("Reshape", [x, target], f"{name}:out", name)

    # -- the graph -----------------------------------------------------------------------
    def convert(self) -> onnx.ModelProto:
        inputs = [self._graph_input(i) for i in self.m.inputs]
        for op in self.m.ops:
            convert = CONVERTERS.get(op.kind)
            if convert is None:
                out = self.t(op.outputs[0]).name if op.outputs else "?"
                raise UserError(f"model.path: '{self.m.path}': op '{out}' is {op.kind}, a "
                                f"TFLite builtin op npuflow does not convert (it converts: "
                                f"{', '.join(sorted(CONVERTERS))})")
            convert(self, op, self.t(op.outputs[0]).name)
        outputs = [self._graph_output(i) for i in self.m.outputs]
        graph = helper.make_graph(self.nodes, self.m.path.stem, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="npuflow (TFLite)")
        helper.set_model_props(model, {IO_LAYOUT_KEY: "NHWC",
                                       "npuflow.source": "tflite",
                                       "npuflow.tflite_description": self.m.description})
        return model

    def _onnx_shape(self, index: int) -> list[int]:
        shape = list(self.t(index).shape)
        return [shape[i] for i in TO_NCHW] if len(shape) == 4 else shape

    def _graph_input(self, index: int) -> onnx.ValueInfoProto:
        t = self.t(index)
        dtype = np.float32 if self._quantized(t) else t.dtype
        info = helper.make_tensor_value_info(t.name, _onnx_type(dtype), self._onnx_shape(index))
        if not self._quantized(t):
            self.names[index] = t.name
            return info
        q = t.quant
        self.const(f"{t.name}:scale", q.scale.reshape(()).astype(np.float32))
        self.const(f"{t.name}:zero_point", q.zero_point.astype(t.dtype).reshape(()))
        args = [f"{t.name}:scale", f"{t.name}:zero_point"]
        self.node("QuantizeLinear", [t.name, *args], f"{t.name}:q", f"{t.name}/QuantizeLinear")
        self.names[index] = self.node("DequantizeLinear", [f"{t.name}:q", *args],
                                      f"{t.name}:dq", f"{t.name}/DequantizeLinear")
        return info

    def _graph_output(self, index: int) -> onnx.ValueInfoProto:
        t = self.t(index)
        name = self.names[index]
        if name != t.name:
            self.node("Identity", [name], t.name, f"{t.name}/Output")
        dtype = np.float32 if self._quantized(t) else t.dtype
        return helper.make_tensor_value_info(t.name, _onnx_type(dtype), self._onnx_shape(index))


# -- the ops --------------------------------------------------------------------------------


def _same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's SAME padding: the output is ceil(size / stride); the extra goes after."""
    effective = (kernel - 1) * dilation + 1
    total = max((math.ceil(size / stride) - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def _pads(o: Op, c: Converter, kernel: tuple[int, int], dilation: tuple[int, int]) -> list[int]:
    if o.options.padding != 0:  # VALID
        return [0, 0, 0, 0]
    _, h, w, _ = c.t(o.inputs[0]).shape
    top, bottom = _same_pads(h, kernel[0], o.options.strideH, dilation[0])
    left, right = _same_pads(w, kernel[1], o.options.strideW, dilation[1])
    return [top, left, bottom, right]


def _bias(c: Converter, o: Op, position: int) -> list[str]:
    if len(o.inputs) > position and o.inputs[position] >= 0:
        return [c.value(o.inputs[position])]
    return []


def _conv(c: Converter, o: Op, name: str) -> None:
    x, w = c.value(o.inputs[0]), c.t(o.inputs[1])
    depthwise = o.kind == "DEPTHWISE_CONV_2D"
    data = w.data.transpose(3, 0, 1, 2) if depthwise else w.data.transpose(0, 3, 1, 2)
    weights = c.weight(w.index, data, 0)
    dilation = (o.options.dilationHFactor, o.options.dilationWFactor)
    kernel = data.shape[2:]
    group = c.t(o.inputs[0]).shape[3] if depthwise else 1
    y = c.node("Conv", [x, weights, *_bias(c, o, 2)], c.result(o.outputs[0]) + ":conv",
               name, strides=[o.options.strideH, o.options.strideW], dilations=list(dilation),
               pads=_pads(o, c, kernel, dilation), group=group)
    _done(c, o, name, y)


def _done(c: Converter, o: Op, name: str, y: str) -> None:
    """The op's result ``y`` through its fused activation into the tensor's result name,
    then quantized as the file says."""
    out = c.result(o.outputs[0])
    code = getattr(o.options, "fusedActivationFunction", 0) if o.options is not None else 0
    y = c.activation(code, y, out, name) if code else _rename(c, y, out)
    c.finish(o.outputs[0], y)


def _rename(c: Converter, value: str, out: str) -> str:
    """Make the node that wrote ``value`` (the op's last) write ``out``: no Identity."""
    last = c.nodes[-1]
    if list(last.output) == [value]:
        last.output[0] = out
        return out
    return c.node("Identity", [value], out, f"{out}/Identity")


def _fully_connected(c: Converter, o: Op, name: str) -> None:
    src, w = c.t(o.inputs[0]), c.t(o.inputs[1])
    if o.options is not None and o.options.keepNumDims and len(src.shape) > 2:
        raise UserError(f"model.path: '{c.m.path}': op '{name}' (FULLY_CONNECTED) keeps "
                        "its input's dims, which npuflow does not convert")
    x = c.value(o.inputs[0])
    data = w.data
    if len(src.shape) == 4:  # flattening NHWC: the weight columns follow NCHW order instead
        _, h, wd, ch = src.shape
        data = data.reshape(-1, h, wd, ch).transpose(0, 3, 1, 2).reshape(data.shape)
    if len(src.shape) != 2:
        x = c.reshape(x, [-1, w.shape[1]], f"{name}/Flatten")
    weights = c.weight(w.index, data, 0)
    y = c.node("Gemm", [x, weights, *_bias(c, o, 2)], c.result(o.outputs[0]) + ":gemm", name,
               transB=1)
    _done(c, o, name, y)


def _elementwise(onnx_op: str) -> Callable[[Converter, Op, str], None]:
    def convert(c: Converter, o: Op, name: str) -> None:
        live = next((i for i in o.inputs if not c.t(i).is_constant), o.inputs[0])
        args = [c.value(i, like=live if c.t(i).is_constant else None) for i in o.inputs]
        y = c.node(onnx_op, args, c.result(o.outputs[0]) + ":op", name)
        _done(c, o, name, y)
    return convert


def _unary(onnx_op: str, **attrs: object) -> Callable[[Converter, Op, str], None]:
    def convert(c: Converter, o: Op, name: str) -> None:
        y = c.node(onnx_op, [c.value(o.inputs[0])], c.result(o.outputs[0]) + ":op", name,
                   **attrs)
        _done(c, o, name, y)
    return convert


def _clip(low: float, high: float) -> Callable[[Converter, Op, str], None]:
    def convert(c: Converter, o: Op, name: str) -> None:
        bounds = [c.const(c.fresh(f"{name}/clip"), np.array(v, np.float32))
                  for v in (low, high)]
        y = c.node("Clip", [c.value(o.inputs[0]), *bounds], c.result(o.outputs[0]) + ":op",
                   name)
        _done(c, o, name, y)
    return convert


def _pool(c: Converter, o: Op, name: str) -> None:
    kernel = (o.options.filterHeight, o.options.filterWidth)
    onnx_op = "AveragePool" if o.kind == "AVERAGE_POOL_2D" else "MaxPool"
    y = c.node(onnx_op, [c.value(o.inputs[0])], c.result(o.outputs[0]) + ":pool", name,
               kernel_shape=list(kernel), strides=[o.options.strideH, o.options.strideW],
               pads=_pads(o, c, kernel, (1, 1)))
    _done(c, o, name, y)


def _axes(c: Converter, index: int, axes: list[int]) -> list[int]:
    rank = len(c.t(index).shape)
    axes = [a % rank for a in axes]
    return [NHWC_AXIS[a] for a in axes] if rank == 4 else axes


def _mean(c: Converter, o: Op, name: str) -> None:
    src = o.inputs[0]
    axes = sorted(_axes(c, src, [int(a) for a in np.ravel(c.t(o.inputs[1]).data)]))
    keep = bool(o.options.keepDims) if o.options is not None else False
    onnx_op = {"MEAN": "ReduceMean", "SUM": "ReduceSum", "REDUCE_MAX": "ReduceMax"}[o.kind]
    spatial = c.rank4(src) and axes == [2, 3]
    if keep or not c.rank4(src) or spatial:
        y = _reduce(c, onnx_op, c.value(src), axes, keep, name)
    else:  # dropping axes of an NCHW tensor: take them in TFLite's order
        y = _reduce(c, onnx_op, c.value(src), axes, True, name)
        y = c.reshape(c.to_nhwc(y, src, name), list(c.t(o.outputs[0]).shape), f"{name}/Drop")
    _done(c, o, name, y)


def _reduce(c: Converter, onnx_op: str, x: str, axes: list[int], keep: bool, name: str) -> str:
    """ReduceSum takes its axes as an input from opset 13, the others from opset 18."""
    if onnx_op == "ReduceSum" or c.opset >= 18:
        target = c.const(c.fresh(f"{name}/axes"), np.array(axes, np.int64))
        return c.node(onnx_op, [x, target], f"{name}:reduce", name, keepdims=int(keep))
    return c.node(onnx_op, [x], f"{name}:reduce", name, axes=axes, keepdims=int(keep))


def _softmax(c: Converter, o: Op, name: str) -> None:
    x = c.value(o.inputs[0])
    beta = float(o.options.beta) if o.options is not None else 1.0
    if beta != 1.0:
        x = c.node("Mul", [x, c.const(c.fresh(f"{name}/beta"), np.array(beta, np.float32))],
                   f"{name}:scaled", f"{name}/Beta")
    axis = 1 if c.rank4(o.inputs[0]) else -1
    y = c.node("Softmax", [x], c.result(o.outputs[0]) + ":op", name, axis=axis)
    _done(c, o, name, y)


def _reshape(c: Converter, o: Op, name: str) -> None:
    src, out = o.inputs[0], c.t(o.outputs[0])
    x = c.value(src)
    if c.rank4(src):
        x = c.to_nhwc(x, src, name)
    if len(out.shape) == 4:
        y = c.from_nhwc(x, out.shape, name)
    else:
        y = c.reshape(x, list(out.shape), name)
    _done(c, o, name, y)


def _concat(c: Converter, o: Op, name: str) -> None:
    axis = _axes(c, o.outputs[0], [o.options.axis])[0]
    y = c.node("Concat", [c.value(i) for i in o.inputs], c.result(o.outputs[0]) + ":op", name,
               axis=axis)
    _done(c, o, name, y)


def _pad(c: Converter, o: Op, name: str) -> None:
    src = o.inputs[0]
    pads = np.asarray(c.t(o.inputs[1]).data, np.int64).reshape(-1, 2)
    if c.rank4(src):
        pads = pads[list(TO_NCHW)]
    args = [c.value(src), c.const(c.fresh(f"{name}/pads"),
                                  np.concatenate([pads[:, 0], pads[:, 1]]))]
    if len(o.inputs) > 2 and o.inputs[2] >= 0:  # PADV2's value, in real units
        args.append(c.value(o.inputs[2]))
    y = c.node("Pad", args, c.result(o.outputs[0]) + ":op", name)
    _done(c, o, name, y)


def _quantize(c: Converter, o: Op, name: str) -> None:
    """QUANTIZE (float -> int, or int -> int at another scale) is the QuantizeLinear that
    ``finish`` writes; DEQUANTIZE hands on the real values its input already has."""
    if o.kind == "DEQUANTIZE":
        c.names[o.outputs[0]] = c.value(o.inputs[0])
        return
    c.finish(o.outputs[0], c.value(o.inputs[0]))


def _resize(c: Converter, o: Op, name: str) -> None:
    out = c.t(o.outputs[0])
    sizes = c.const(c.fresh(f"{name}/sizes"),
                    np.array([out.shape[i] for i in TO_NCHW], np.int64))
    nearest = o.kind == "RESIZE_NEAREST_NEIGHBOR"
    align = bool(o.options.alignCorners) if o.options is not None else False
    half = bool(o.options.halfPixelCenters) if o.options is not None else False
    mode = "align_corners" if align else "half_pixel" if half else "asymmetric"
    attrs: dict[str, object] = {"mode": "nearest" if nearest else "linear",
                                "coordinate_transformation_mode": mode}
    if nearest:  # TF floors asymmetric coordinates; rounds half-pixel and aligned ones
        attrs["nearest_mode"] = "floor" if mode == "asymmetric" else "round_prefer_ceil"
    y = c.node("Resize", [c.value(o.inputs[0]), "", "", sizes],
               c.result(o.outputs[0]) + ":op", name, **attrs)
    _done(c, o, name, y)


def _transpose(c: Converter, o: Op, name: str) -> None:
    perm = [int(p) for p in np.ravel(c.t(o.inputs[1]).data)]
    if c.rank4(o.inputs[0]):
        perm = [TO_NHWC[perm[TO_NCHW[i]]] for i in range(4)]
    y = c.node("Transpose", [c.value(o.inputs[0])], c.result(o.outputs[0]) + ":op", name,
               perm=perm)
    _done(c, o, name, y)


def _transpose_conv(c: Converter, o: Op, name: str) -> None:
    w, src = c.t(o.inputs[1]), o.inputs[2]
    data = w.data.transpose(3, 0, 1, 2)  # OHWI -> I O H W
    weights = c.weight(w.index, data, 1)
    _, h, wd, _ = c.t(src).shape
    _, oh, ow, _ = c.t(o.outputs[0]).shape
    kh, kw = data.shape[2:]
    sh, sw = o.options.strideH, o.options.strideW
    total_h, total_w = max((h - 1) * sh + kh - oh, 0), max((wd - 1) * sw + kw - ow, 0)
    pads = [total_h // 2, total_w // 2, total_h - total_h // 2, total_w - total_w // 2]
    y = c.node("ConvTranspose", [c.value(src), weights, *_bias(c, o, 3)],
               c.result(o.outputs[0]) + ":op", name, strides=[sh, sw], pads=pads,
               kernel_shape=[kh, kw])
    _done(c, o, name, y)


def _leaky_relu(c: Converter, o: Op, name: str) -> None:
    _unary("LeakyRelu", alpha=float(o.options.alpha))(c, o, name)


CONVERTERS: dict[str, Callable[[Converter, Op, str], None]] = {
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _conv, "FULLY_CONNECTED": _fully_connected,
    "TRANSPOSE_CONV": _transpose_conv,
    "ADD": _elementwise("Add"), "SUB": _elementwise("Sub"), "MUL": _elementwise("Mul"),
    "DIV": _elementwise("Div"), "MAXIMUM": _elementwise("Max"),
    "MINIMUM": _elementwise("Min"),
    "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool,
    "MEAN": _mean, "SUM": _mean, "REDUCE_MAX": _mean,
    "SOFTMAX": _softmax, "RESHAPE": _reshape, "SQUEEZE": _reshape, "EXPAND_DIMS": _reshape,
    "CONCATENATION": _concat, "PAD": _pad, "PADV2": _pad,
    "QUANTIZE": _quantize, "DEQUANTIZE": _quantize,
    "RESIZE_NEAREST_NEIGHBOR": _resize, "RESIZE_BILINEAR": _resize,
    "TRANSPOSE": _transpose,
    "LOGISTIC": _unary("Sigmoid"), "TANH": _unary("Tanh"), "RELU": _unary("Relu"),
    "RELU6": _clip(0.0, 6.0), "RELU_N1_TO_1": _clip(-1.0, 1.0), "RELU_0_TO_1": _clip(0.0, 1.0),
    "HARD_SWISH": _unary("HardSwish"), "LEAKY_RELU": _leaky_relu, "ELU": _unary("Elu"),
    "EXP": _unary("Exp"), "LOG": _unary("Log"), "SQRT": _unary("Sqrt"), "ABS": _unary("Abs"),
    "NEG": _unary("Neg"),
}


def convert(model: TFLiteModel) -> onnx.ModelProto:
    return Converter(model).convert()
