"""YOLOv6 3.0 (meituan/YOLOv6 ``configs/yolov6n.py``, ``yolov6s.py``) as rknn_model_zoo
exports it.

Deployed RepVGG blocks are a 3x3 conv + ReLU (the 1x1 and identity branches fold into it);
EfficientRep's stages are a stride-2 block then a RepBlock of n blocks, with SimCSPSPPF
(SPPF inside a CSP split, ReLU convs) last. The RepBiFPAN neck's BiFusion joins three
scales: the coarser one upsampled by a 2x2 stride-2 ConvTranspose, the same one through a
1x1 conv, the finer one through a 1x1 conv and a stride-2 3x3 conv. The efficient
decoupled head (SiLU) per scale: a 1x1 stem, a 3x3 conv and a 1x1 to the classes, a 3x3
conv and a 1x1 to the 4 box channels (the n and s models use no DFL). rknn_model_zoo
(airockchip/yolov6, examples/yolov6/README.md) keeps the box and class convs' outputs and
adds a ReduceSum + Clip of the class scores.
"""

from __future__ import annotations

import math

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.cnn import _conv_bn


def _relu_conv(g: GraphBuilder, x: str, cout: int, k: int = 1, s: int = 1) -> str:
    return _conv_bn(g, x, cout, k, s, act="relu")


def _rep_block(g: GraphBuilder, x: str, cout: int, n: int) -> str:
    for _ in range(n):
        x = _relu_conv(g, x, cout, 3)
    return x


def _sim_csp_sppf(g: GraphBuilder, x: str, cout: int) -> str:
    """SimCSPSPPF: SPPF's three chained 5x5 max-pools inside a CSP split (ReLU convs)."""
    c = cout // 2
    x1 = _relu_conv(g, _relu_conv(g, _relu_conv(g, x, c), c, 3), c)
    y0 = _relu_conv(g, x, c)
    y1 = g.maxpool(x1, 5, 1, 2)
    y2 = g.maxpool(y1, 5, 1, 2)
    y3 = _relu_conv(g, _relu_conv(g, g.concat([x1, y1, y2, g.maxpool(y2, 5, 1, 2)]), c), c, 3)
    return _relu_conv(g, g.concat([y0, y3]), cout)


def _bifusion(g: GraphBuilder, coarse: str, same: str, fine: str, cout: int) -> str:
    up = g.upsample_transposed(coarse)
    down = _relu_conv(g, _relu_conv(g, fine, cout), cout, 3, 2)
    return _relu_conv(g, g.concat([up, _relu_conv(g, same, cout), down]), cout)


def yolov6(seed: int, opset: int, depth: float = 0.33, width: float = 0.25,
           num_classes: int = 80, image_size: int = 640, name: str = "yolov6n"
           ) -> onnx.ModelProto:
    """YOLOv6 3.0 n (0.33, 0.25) or s (0.33, 0.50): channels = ceil(c x width / 8) x 8,
    repeats = max(round(n x depth), 1)."""

    def ch(c: int) -> int:
        return math.ceil(c * width / 8) * 8

    def rep(n: int) -> int:
        return max(round(n * depth), 1)

    g = GraphBuilder(name, seed, opset)
    x = _relu_conv(g, g.input("images", (1, 3, image_size, image_size)), ch(64), 3, 2)
    p2 = _rep_block(g, _relu_conv(g, x, ch(128), 3, 2), ch(128), rep(6))
    p3 = _rep_block(g, _relu_conv(g, p2, ch(256), 3, 2), ch(256), rep(12))
    p4 = _rep_block(g, _relu_conv(g, p3, ch(512), 3, 2), ch(512), rep(18))
    p5 = _sim_csp_sppf(g, _rep_block(g, _relu_conv(g, p4, ch(1024), 3, 2), ch(1024), rep(6)),
                   ch(1024))

    fpn0 = _relu_conv(g, p5, ch(256))
    f4 = _rep_block(g, _bifusion(g, fpn0, p4, p3, ch(256)), ch(256), rep(12))
    fpn1 = _relu_conv(g, f4, ch(128))
    pan2 = _rep_block(g, _bifusion(g, fpn1, p3, p2, ch(128)), ch(128), rep(12))
    pan1 = _rep_block(g, g.concat([_relu_conv(g, pan2, ch(128), 3, 2), fpn1]), ch(256),
                      rep(12))
    pan0 = _rep_block(g, g.concat([_relu_conv(g, pan1, ch(256), 3, 2), fpn0]), ch(512),
                      rep(12))

    for feat in (pan2, pan1, pan0):
        c = g.shape[feat][1]
        stem = _conv_bn(g, feat, c, 1, act="silu")
        g.output(g.conv(_conv_bn(g, stem, c, 3, act="silu"), 4, 1, bias=True))
        cls = g.sigmoid(g.conv(_conv_bn(g, stem, c, 3, act="silu"), num_classes, 1, bias=True))
        g.output(cls)
        g.output(g.channel_sum_clipped(cls))
    return g.build()
