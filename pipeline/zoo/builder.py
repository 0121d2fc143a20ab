"""A small, shape-tracking wrapper over ``onnx.helper`` for writing the built-in zoo.

The zoo models are standard architectures at their published sizes with seeded random
weights: what matters for an NPU study is the graph (shapes, MACs, bytes, op mix), not the
trained values. Weights follow He initialisation and the last BatchNorm of each residual
branch gets a small gamma, so activations stay in a realistic range through deep networks
(otherwise each residual add doubles the variance and int8 calibration becomes meaningless).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _conv_out(size: int, k: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


class GraphBuilder:
    """Appends ONNX nodes while tracking every tensor's static shape."""

    def __init__(self, name: str, seed: int, opset: int = 17) -> None:
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.shape: dict[str, tuple[int, ...]] = {}
        self._counts: dict[str, int] = defaultdict(int)
        self.prefix = ""  # prepended to node and tensor names (a language model's phases)

    # -- bookkeeping -------------------------------------------------------------------
    def _name(self, kind: str) -> str:
        self._counts[kind] += 1
        return f"{self.prefix}{kind}_{self._counts[kind]}"

    def const(self, hint: str, array: np.ndarray) -> str:
        name = self._name(hint)
        self.initializers.append(numpy_helper.from_array(array, name))
        self.shape[name] = tuple(array.shape)
        return name

    def _node(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> str:
        name = self._name(op.lower())
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        self.shape[out] = tuple(int(d) for d in shape)
        return out

    def input(self, name: str, shape: tuple[int, ...]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.shape[name] = tuple(shape)
        return name

    def output(self, tensor: str) -> None:
        info = helper.make_tensor_value_info(tensor, TensorProto.FLOAT, list(self.shape[tensor]))
        self.outputs.append(info)

    def build(self) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", self.opset)],
            producer_name="npuflow.zoo",
        )
        model.ir_version = min(model.ir_version, 9)
        return model

    def _weights(self, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        std = math.sqrt(2.0 / fan_in)
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    # -- convolutional layers -----------------------------------------------------------
    def conv(
        self,
        x: str,
        cout: int,
        k: int | tuple[int, int],
        stride: int = 1,
        pad: int | None = None,
        groups: int = 1,
        bias: bool = False,
    ) -> str:
        """A convolution; ``k`` an int or (height, width) (Inception's 1x7 / 7x1 factors);
        ``pad`` None: "same" for an odd kernel at stride 1, per dimension."""
        n, cin, h, w = self.shape[x]
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (kh // 2, kw // 2) if pad is None else (pad, pad)
        weight = self.const("w", self._weights((cout, cin // groups, kh, kw),
                                               cin // groups * kh * kw))
        inputs = [x, weight]
        if bias:
            inputs.append(self.const("b", np.zeros(cout, np.float32)))
        out_shape = (n, cout, _conv_out(h, kh, stride, ph), _conv_out(w, kw, stride, pw))
        return self._node(
            "Conv",
            inputs,
            out_shape,
            kernel_shape=[kh, kw],
            strides=[stride, stride],
            pads=[ph, pw, ph, pw],
            group=groups,
        )

    def upsample_transposed(self, x: str) -> str:
        """A learned 2x upsample: ConvTranspose, kernel 2, stride 2, with bias."""
        n, c, h, w = self.shape[x]
        weight = self.const("wt", self._weights((c, c, 2, 2), c))
        bias = self.const("b", np.zeros(c, np.float32))
        return self._node("ConvTranspose", [x, weight, bias], (n, c, 2 * h, 2 * w),
                          kernel_shape=[2, 2], strides=[2, 2])

    def batchnorm(self, x: str, gamma_scale: float = 1.0) -> str:
        c = self.shape[x][1]
        r = self.rng
        scale = (gamma_scale * r.uniform(0.5, 1.5, c)).astype(np.float32)
        bias = r.normal(0.0, 0.1, c).astype(np.float32)
        mean = r.normal(0.0, 0.1, c).astype(np.float32)
        var = r.uniform(0.5, 2.0, c).astype(np.float32)
        params = [self.const(h, a) for h, a in (("bn_s", scale), ("bn_b", bias))]
        stats = [self.const(h, a) for h, a in (("bn_mean", mean), ("bn_var", var))]
        return self._node(
            "BatchNormalization", [x, *params, *stats], self.shape[x], epsilon=1e-5
        )

    def maxpool(self, x: str, k: int, stride: int, pad: int) -> str:
        n, c, h, w = self.shape[x]
        shape = (n, c, _conv_out(h, k, stride, pad), _conv_out(w, k, stride, pad))
        return self._node(
            "MaxPool", [x], shape, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4
        )

    def avgpool(self, x: str, k: int, stride: int, pad: int) -> str:
        """Average pooling over the window's real pixels (padding not counted, as TF's
        "same" average pool and Inception's branch pools)."""
        n, c, h, w = self.shape[x]
        shape = (n, c, _conv_out(h, k, stride, pad), _conv_out(w, k, stride, pad))
        return self._node("AveragePool", [x], shape, kernel_shape=[k, k],
                          strides=[stride, stride], pads=[pad] * 4, count_include_pad=0)

    def global_avg_pool(self, x: str) -> str:
        n, c, _, _ = self.shape[x]
        return self._node("GlobalAveragePool", [x], (n, c, 1, 1))

    def resize_nearest(self, x: str, factor: int) -> str:
        n, c, h, w = self.shape[x]
        scales = self.const("scales", np.array([1, 1, factor, factor], np.float32))
        return self._node(
            "Resize", [x, "", scales], (n, c, h * factor, w * factor), mode="nearest"
        )

    # -- activations and elementwise ---------------------------------------------------
    def relu(self, x: str) -> str:
        return self._node("Relu", [x], self.shape[x])

    def relu6(self, x: str) -> str:
        lo = self.const("clip_min", np.array(0.0, np.float32))
        hi = self.const("clip_max", np.array(6.0, np.float32))
        return self._node("Clip", [x, lo, hi], self.shape[x])

    def leaky_relu(self, x: str, alpha: float = 0.1) -> str:
        return self._node("LeakyRelu", [x], self.shape[x], alpha=alpha)

    def sigmoid(self, x: str) -> str:
        return self._node("Sigmoid", [x], self.shape[x])

    def silu(self, x: str) -> str:
        """SiLU as exporters emit it: ``x * sigmoid(x)`` (two nodes)."""
        return self.mul(x, self.sigmoid(x))

    def gelu_erf(self, x: str) -> str:
        """GELU as exporters emit it below opset 20: ``0.5 * x * (1 + erf(x / sqrt 2))``."""
        s = self.shape[x]
        root2 = self.const("sqrt2", np.array(math.sqrt(2.0), np.float32))
        one = self.const("one", np.array(1.0, np.float32))
        half = self.const("half", np.array(0.5, np.float32))
        erf = self._node("Erf", [self._node("Div", [x, root2], s)], s)
        return self._node("Mul", [self.mul(x, self._node("Add", [erf, one], s)), half], s)

    def add(self, a: str, b: str) -> str:
        return self._node("Add", [a, b], np.broadcast_shapes(self.shape[a], self.shape[b]))

    def mul(self, a: str, b: str) -> str:
        return self._node("Mul", [a, b], np.broadcast_shapes(self.shape[a], self.shape[b]))

    def concat(self, xs: list[str], axis: int = 1) -> str:
        shape = list(self.shape[xs[0]])
        shape[axis] = sum(self.shape[x][axis] for x in xs)
        return self._node("Concat", xs, tuple(shape), axis=axis)

    def split(self, x: str, sizes: list[int], axis: int = 1) -> list[str]:
        """ONNX Split (opset >= 13: sizes as an input), one output per size."""
        name = self._name("split")
        outs = [f"{name}_out{i}" for i in range(len(sizes))]
        sizes_const = self.const("split_sizes", np.array(sizes, np.int64))
        self.nodes.append(helper.make_node("Split", [x, sizes_const], outs, name=name, axis=axis))
        for out, size in zip(outs, sizes, strict=True):
            shape = list(self.shape[x])
            shape[axis] = size
            self.shape[out] = tuple(shape)
        return outs

    def channel_sum_clipped(self, x: str) -> str:
        """``clamp(sum over channels, 0, 1)``: ReduceSum + Clip, as rknn_model_zoo's YOLO
        exports add beside the class scores."""
        n, _, h, w = self.shape[x]
        axes = self.const("axes", np.array([1], np.int64))
        total = self._node("ReduceSum", [x, axes], (n, 1, h, w), keepdims=1)
        lo = self.const("clip_min", np.array(0.0, np.float32))
        hi = self.const("clip_max", np.array(1.0, np.float32))
        return self._node("Clip", [total, lo, hi], (n, 1, h, w))

    def softmax(self, x: str, axis: int = -1) -> str:
        return self._node("Softmax", [x], self.shape[x], axis=axis)

    # -- dense and shape ops -------------------------------------------------------------
    def flatten(self, x: str) -> str:
        shape = self.shape[x]
        return self._node("Flatten", [x], (shape[0], int(np.prod(shape[1:]))), axis=1)

    def gemm(self, x: str, nout: int) -> str:
        n, nin = self.shape[x]
        w = self.const("fc_w", self._weights((nout, nin), nin) * 0.5)
        b = self.const("fc_b", np.zeros(nout, np.float32))
        return self._node("Gemm", [x, w, b], (n, nout), transB=1)

    def linear(self, x: str, nout: int) -> str:
        """``x @ W + b`` as MatMul + Add, the way transformer exporters emit it."""
        nin = self.shape[x][-1]
        w = self.const("w", self._weights((nin, nout), nin) * 0.5)
        b = self.const("b", np.zeros(nout, np.float32))
        y = self._node("MatMul", [x, w], (*self.shape[x][:-1], nout))
        return self.add(y, b)

    def matmul(self, a: str, b: str) -> str:
        sa, sb = self.shape[a], self.shape[b]
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
        return self._node("MatMul", [a, b], (*batch, sa[-2], sb[-1]))

    def space_to_depth_slices(self, x: str) -> str:
        """YOLOv5 v5 / YOLOX ``Focus``: four stride-2 Slices of H and W, concatenated on
        channels (top-left, bottom-left, top-right, bottom-right), as torch exports it."""
        n, c, h, w = self.shape[x]
        axes = self.const("axes", np.array([2, 3], np.int64))
        steps = self.const("steps", np.array([2, 2], np.int64))
        end = self.const("ends", np.array([h, w], np.int64))
        parts = []
        for dh, dw in ((0, 0), (1, 0), (0, 1), (1, 1)):
            start = self.const("starts", np.array([dh, dw], np.int64))
            parts.append(self._node("Slice", [x, start, end, axes, steps],
                                    (n, c, h // 2, w // 2)))
        return self.concat(parts)

    def reshape(self, x: str, shape: tuple[int, ...]) -> str:
        target = self.const("shape", np.array(shape, np.int64))
        return self._node("Reshape", [x, target], shape)

    def transpose(self, x: str, perm: tuple[int, ...]) -> str:
        shape = tuple(self.shape[x][p] for p in perm)
        return self._node("Transpose", [x], shape, perm=list(perm))

    def scale(self, x: str, factor: float) -> str:
        return self.mul(x, self.const("scale", np.array(factor, np.float32)))

    def layernorm_exported(self, x: str, axis: int = -1, eps: float = 1e-5) -> str:
        """LayerNorm over ``axis`` as torch.onnx writes it: one LayerNormalization from
        opset 17; below, ``(x - mean) / sqrt(var + eps) * gamma + beta`` node for node
        (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)."""
        shape = self.shape[x]
        if self.opset >= 17 and axis in (-1, len(shape) - 1):
            return self.layernorm(x, eps)
        axis %= len(shape)
        reduced = tuple(1 if i == axis else d for i, d in enumerate(shape))
        mean = self._node("ReduceMean", [x], reduced, axes=[axis], keepdims=1)
        centred = self._node("Sub", [x, mean], shape)
        square = self._node("Pow", [centred, self.const("two", np.array(2.0, np.float32))],
                            shape)
        var = self._node("ReduceMean", [square], reduced, axes=[axis], keepdims=1)
        std = self._node("Sqrt", [self.add(var, self.const("eps", np.array(eps, np.float32)))],
                         reduced)
        normed = self._node("Div", [centred, std], shape)
        param = tuple(d if i == axis else 1 for i, d in enumerate(shape))[axis:]
        gamma = self.const("ln_g", np.ones(param, np.float32))
        return self.add(self.mul(normed, gamma), self.const("ln_b", np.zeros(param, np.float32)))

    def layernorm(self, x: str, eps: float = 1e-12) -> str:
        c = self.shape[x][-1]
        g = self.const("ln_g", np.ones(c, np.float32))
        b = self.const("ln_b", np.zeros(c, np.float32))
        return self._node("LayerNormalization", [x, g, b], self.shape[x], axis=-1, epsilon=eps)
