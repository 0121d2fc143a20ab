"""YOLO11 (ultralytics 8.3 ``yolo11.yaml``) as rknn_model_zoo exports it for its RK3588 table.

What it adds to YOLOv8 (``pipeline.zoo.yolov8``): C3k2 blocks (C2f whose inner blocks are
0.5-wide bottlenecks, or C3k blocks of two bottlenecks for m/l/x), a C2PSA block after
SPPF (multi-head self-attention over the 20x20 map: 1x1 qkv conv, q^T k softmax, v attn^T,
a depthwise 3x3 positional conv on v, 1x1 projection, then a two-conv feed-forward), and a
class branch of depthwise-separable convs. The head is cut as for YOLOv8 (rknn_model_zoo
examples/yolo11/README.md): box 64, class Sigmoid 80 and a score-sum channel per scale.
"""

from __future__ import annotations

import math

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.cnn import _conv_bn
from pipeline.zoo.yolo import _sppf
from pipeline.zoo.yolov8 import _conv, detect_head


def _bottleneck(g: GraphBuilder, x: str, hidden: int) -> str:
    c = g.shape[x][1]
    return g.add(x, _conv(g, _conv(g, x, hidden, 3), c, 3, gamma=0.3))


def _c3k(g: GraphBuilder, x: str, cout: int) -> str:
    hidden = cout // 2
    y = _conv(g, x, hidden)
    for _ in range(2):
        y = _bottleneck(g, y, hidden)
    return _conv(g, g.concat([y, _conv(g, x, hidden)]), cout)


def _c3k2(g: GraphBuilder, x: str, cout: int, n: int, c3k: bool, e: float = 0.5) -> str:
    hidden = int(cout * e)
    parts = g.split(_conv(g, x, 2 * hidden), [hidden, hidden])
    for _ in range(n):
        parts.append(_c3k(g, parts[-1], hidden) if c3k else _bottleneck(g, parts[-1], hidden // 2))
    return _conv(g, g.concat(parts), cout)


def _attention(g: GraphBuilder, x: str, heads: int) -> str:
    n, c, h, w = g.shape[x]
    head_dim = c // heads
    key_dim = head_dim // 2
    qkv = _conv_bn(g, x, c + 2 * key_dim * heads, 1, act=None)
    q, k, v = g.split(g.reshape(qkv, (n, heads, 2 * key_dim + head_dim, h * w)),
                      [key_dim, key_dim, head_dim], axis=2)
    attn = g.softmax(g.scale(g.matmul(g.transpose(q, (0, 1, 3, 2)), k), key_dim ** -0.5))
    y = g.reshape(g.matmul(v, g.transpose(attn, (0, 1, 3, 2))), (n, c, h, w))
    y = g.add(y, _conv_bn(g, g.reshape(v, (n, c, h, w)), c, 3, groups=c, act=None))
    return _conv_bn(g, y, c, 1, act=None)


def _c2psa(g: GraphBuilder, x: str, n: int) -> str:
    c = g.shape[x][1] // 2
    a, b = g.split(_conv(g, x, 2 * c), [c, c])
    for _ in range(n):
        b = g.add(b, _attention(g, b, c // 64))
        b = g.add(b, _conv_bn(g, _conv(g, b, 2 * c), c, 1, act=None, gamma=0.3))
    return _conv(g, g.concat([a, b]), 2 * c)


def _dw_separable(g: GraphBuilder, x: str, cout: int) -> str:
    c = g.shape[x][1]
    return _conv(g, _conv_bn(g, x, c, 3, groups=c, act="silu"), cout)


def yolo11(seed: int, opset: int, depth_multiple: float = 0.50, width_multiple: float = 0.25,
           max_channels: int = 1024, c3k: bool = False, num_classes: int = 80,
           image_size: int = 640, name: str = "yolo11n") -> onnx.ModelProto:
    """YOLO11 at any scale: n (0.50, 0.25, 1024), s (0.50, 0.50, 1024), m (0.50, 1.00, 512,
    C3k inner blocks) in ``yolo11.yaml``; channels = ceil(min(c, max_channels) x width / 8)
    x 8, repeats = max(round(n x depth), 1)."""

    def ch(c: int) -> int:
        return math.ceil(min(c, max_channels) * width_multiple / 8) * 8

    n2 = max(round(2 * depth_multiple), 1)
    g = GraphBuilder(name, seed, opset)
    x = _conv(g, g.input("images", (1, 3, image_size, image_size)), ch(64), 3, 2)
    x = _c3k2(g, _conv(g, x, ch(128), 3, 2), ch(256), n2, c3k, 0.25)
    p3 = _c3k2(g, _conv(g, x, ch(256), 3, 2), ch(512), n2, c3k, 0.25)
    p4 = _c3k2(g, _conv(g, p3, ch(512), 3, 2), ch(512), n2, True)
    x = _sppf(g, _c3k2(g, _conv(g, p4, ch(1024), 3, 2), ch(1024), n2, True), ch(1024), "silu")
    p5 = _c2psa(g, x, n2)

    h13 = _c3k2(g, g.concat([g.resize_nearest(p5, 2), p4]), ch(512), n2, c3k)
    out_p3 = _c3k2(g, g.concat([g.resize_nearest(h13, 2), p3]), ch(256), n2, c3k)
    out_p4 = _c3k2(g, g.concat([_conv(g, out_p3, ch(256), 3, 2), h13]), ch(512), n2, c3k)
    out_p5 = _c3k2(g, g.concat([_conv(g, out_p4, ch(512), 3, 2), p5]), ch(1024), n2, True)

    detect_head(g, [out_p3, out_p4, out_p5], ch(256), num_classes,
                lambda g, x, c: _dw_separable(g, _dw_separable(g, x, c), c))
    return g.build()
