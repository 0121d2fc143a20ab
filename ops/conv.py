"""Convolution (standard, grouped, depthwise, dilated, strided, padded) and ConvTranspose.

MACs = N x M x OH x OW x (C / group) x kh x kw, the count papers and torchvision report.
Lowering is im2col (Jia 2014; the mapping SCALE-Sim uses): one GEMM per group with
M = N x OH x OW output pixels, K = C/group x kh x kw, N = M_out / group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ops.constraints import COMMON, constraint, int_pair
from ops.constraints import check_stride as check_any_stride
from ops.conv_lowering import LOWERINGS, conv_lowering
from ops.graph import Graph, Node
from ops.work import ARRAY, GemmShape, Work


def _shapes(node: Node, graph: Graph) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    x, w = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    y = graph.tensors[node.outputs[0]]
    if x.shape is None or w.shape is None or y.shape is None:
        raise ValueError(f"{node.op_type} '{node.name}' has a dynamic shape")
    return x.shape, w.shape, y.shape


def is_depthwise(node: Node, graph: Graph) -> bool:
    x, _, _ = _shapes(node, graph)
    group = int(node.attrs.get("group", 1))
    return node.op_type == "Conv" and group > 1 and group == x[1]


def conv_work(node: Node, graph: Graph) -> Work:
    _, w, y = _shapes(node, graph)
    group = int(node.attrs.get("group", 1))
    n, out_c, spatial = y[0], y[1], y[2:]
    kernel = 1
    for k in w[2:]:
        kernel *= k
    pixels = n
    for d in spatial:
        pixels *= d
    gemm = GemmShape(m=pixels, k=w[1] * kernel, n=out_c // group, groups=group,
                     width=spatial[-1] if spatial else 0)
    bias = len(node.inputs) > 2 and bool(node.inputs[2])
    return Work(
        unit=ARRAY,
        macs=gemm.macs,
        input_elems=graph.tensors[node.inputs[0]].size,
        weight_elems=graph.tensors[node.inputs[1]].size + (out_c if bias else 0),
        output_elems=graph.tensors[node.outputs[0]].size,
        gemm=gemm,
    )


def conv_transpose_work(node: Node, graph: Graph) -> Work:
    """Each input pixel scatters a kh x kw x (M/group) patch: MACs = N x C x H x W x M/g x k.

    The GEMM is the one an NPU runs: a convolution over the output grid (sub-pixel
    convolution, Shi et al. CVPR 2016) whose taps are the kernel positions that land on one
    output pixel, ceil(k / stride) per axis. RKNN-Toolkit2 costs a 2x2 / stride-2
    ConvTranspose on rk3588 per output pixel, like a 1x1 convolution over the output."""
    x, w, y = _shapes(node, graph)
    group = int(node.attrs.get("group", 1))
    strides = node.attrs.get("strides") or [1] * (len(w) - 2)
    kernel = taps = 1
    for k, s in zip(w[2:], strides, strict=True):
        kernel *= k
        taps *= -(-k // int(s))
    in_pixels, out_pixels = x[0], y[0]
    for d in x[2:]:
        in_pixels *= d
    for d in y[2:]:
        out_pixels *= d
    gemm = GemmShape(m=out_pixels, k=x[1] // group * taps, n=w[1], groups=group,
                     width=y[-1] if len(y) > 2 else 0)
    return Work(
        unit=ARRAY,
        macs=in_pixels * (x[1] // group) * w[1] * kernel * group,
        input_elems=graph.tensors[node.inputs[0]].size,
        weight_elems=graph.tensors[node.inputs[1]].size,
        output_elems=graph.tensors[node.outputs[0]].size,
        gemm=gemm,
    )


@constraint("kernel_max")
def check_kernel_size(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Kernel height and width must be at most {kernel_max}"""
    kh, kw = int_pair(graph.tensors[node.inputs[1]].shape[2:])
    lowering = conv_lowering(node, graph, limits)
    if max(kh, kw) > limits["kernel_max"] and lowering.rewritten:
        return True, f"kernel {kh}x{kw}: {lowering.how}"
    return max(kh, kw) <= limits["kernel_max"], f"kernel {kh}x{kw}"


@constraint("stride_max")
def check_stride(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Stride must be at most {stride_max} in both dimensions"""
    lowering = conv_lowering(node, graph, limits)
    if lowering.rewritten:
        sh, sw = int_pair(node.attrs.get("strides"))
        return True, f"stride {sh}x{sw}: {lowering.how}"
    return check_any_stride.fn(node, graph, limits)


@constraint("lowering")
def check_lowering(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Convolutions over the kernel and stride limits are rewritten by the compiler's
    {lowering} rules"""
    lowering = conv_lowering(node, graph, limits)
    return True, lowering.how or "as written"


@constraint("dilation_max")
def check_dilation(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Dilation must be at most {dilation_max} in both dimensions"""
    dh, dw = int_pair(node.attrs.get("dilations"))
    return max(dh, dw) <= limits["dilation_max"], f"dilation {dh}x{dw}"


def _dilated_kernel(node: Node, graph: Graph) -> tuple[int, int]:
    kh, kw = int_pair(graph.tensors[node.inputs[1]].shape[2:])
    dh, dw = int_pair(node.attrs.get("dilations"))
    return (kh - 1) * dh + 1, (kw - 1) * dw + 1


@constraint("dilated_kernel_height_max")
def check_dilated_height(node: Node, graph: Graph, limits: Mapping[str, Any]
                         ) -> tuple[bool, str]:
    """Dilated kernel height must be at most {dilated_kernel_height_max}"""
    h, _ = _dilated_kernel(node, graph)
    return h <= limits["dilated_kernel_height_max"], f"dilated kernel height {h}"


@constraint("dilated_kernel_area_max")
def check_dilated_area(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Product of dilated kernel width and height must be at most {dilated_kernel_area_max}"""
    h, w = _dilated_kernel(node, graph)
    return h * w <= limits["dilated_kernel_area_max"], f"dilated kernel {h}x{w}"


@constraint("depthwise")
def check_depthwise(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Depthwise convolution supported: {depthwise}"""
    dw = is_depthwise(node, graph)
    return (not dw) or bool(limits["depthwise"]), "depthwise" if dw else "not depthwise"


@constraint("grouped")
def check_grouped(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Grouped (non-depthwise) convolution supported: {grouped}"""
    group = int(node.attrs.get("group", 1))
    grouped = group > 1 and not is_depthwise(node, graph)
    return (not grouped) or bool(limits["grouped"]), f"group {group}"


@constraint("channel_multiple")
def check_channel_multiple(node: Node, graph: Graph, limits: Mapping[str, Any]
                           ) -> tuple[bool, str]:
    """Input channels must be a multiple of {channel_multiple}"""
    c = graph.tensors[node.inputs[0]].shape[1]
    return c % limits["channel_multiple"] == 0, f"input channels {c}"


@constraint("weights_max_kb")
def check_weight_size(node: Node, graph: Graph, limits: Mapping[str, Any]) -> tuple[bool, str]:
    """Weights must fit in {weights_max_kb} KB at int8"""
    kb = graph.tensors[node.inputs[1]].size / 1024
    return kb <= limits["weights_max_kb"], f"weights {kb:.1f} KB"


CONV_CHECKS = (*COMMON, check_kernel_size, check_stride, check_dilation, check_dilated_height,
               check_dilated_area, check_depthwise, check_grouped, check_channel_multiple,
               check_weight_size, check_lowering)
CONV_TRANSPOSE_CHECKS = (*COMMON, check_kernel_size, check_any_stride)
LOWERING_NAMES = tuple(LOWERINGS)
