"""YOLOv10 (Wang et al., "YOLOv10: Real-Time End-to-End Object Detection", NeurIPS 2024;
THU-MIG ``yolov10n.yaml`` / ``yolov10s.yaml``) as rknn_model_zoo exports it for its table.

What it adds to YOLOv8 (``pipeline.zoo.yolov8``): spatial-channel decoupled downsampling
(SCDown: a 1x1 conv, then a stride-2 3x3 depthwise conv) for P4 and P5, a partial
self-attention block after SPPF (PSA: half the channels through multi-head attention over
the 20x20 map and a feed-forward, as YOLO11's C2PSA with one block,
``pipeline.zoo.yolo11``), compact inverted blocks (C2fCIB: C2f whose inner blocks are
3x3 depthwise, 1x1, a 7x7 depthwise (RepVGGDW, fused for export), 1x1, 3x3 depthwise) on
the largest scale, and the one-to-one head with a depthwise-separable class branch. The
export (airockchip/yolov10, rknn_model_zoo examples/yolov10) cuts the head as YOLOv8's:
box 64, class Sigmoid 80 and a score-sum channel per scale.
"""

from __future__ import annotations

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.cnn import _conv_bn
from pipeline.zoo.yolo import _sppf
from pipeline.zoo.yolo11 import _c2psa, _dw_separable
from pipeline.zoo.yolov8 import _c2f, _conv, detect_head, scaling, stem_to_p3


def _dw(g: GraphBuilder, x: str, k: int, stride: int = 1, act: str | None = "silu") -> str:
    c = g.shape[x][1]
    return _conv_bn(g, x, c, k, stride, groups=c, act=act)


def _scdown(g: GraphBuilder, x: str, cout: int) -> str:
    return _dw(g, _conv(g, x, cout), 3, 2, act=None)


def _cib(g: GraphBuilder, x: str) -> str:
    """CIB with e = 1.0 and the large kernel, residual (C2fCIB's inner block)."""
    c = g.shape[x][1]
    y = _conv(g, _dw(g, x, 3), 2 * c)
    y = _conv(g, _dw(g, y, 7), c)
    return g.add(x, _dw(g, y, 3))


def _c2fcib(g: GraphBuilder, x: str, cout: int, n: int) -> str:
    hidden = cout // 2
    parts = g.split(_conv(g, x, 2 * hidden), [hidden, hidden])
    for _ in range(n):
        parts.append(_cib(g, parts[-1]))
    return _conv(g, g.concat(parts), cout)


def yolov10(seed: int, opset: int, depth_multiple: float = 0.33, width_multiple: float = 0.25,
            max_channels: int = 1024, cib_backbone: bool = False, num_classes: int = 80,
            image_size: int = 640, name: str = "yolov10n") -> onnx.ModelProto:
    """YOLOv10 n (0.33, 0.25) or s (0.33, 0.50; ``cib_backbone``: its P5 backbone stage is a
    C2fCIB, n's a C2f), scaled as YOLOv8 (``pipeline.zoo.yolov8.scaling``)."""
    ch, rep = scaling(width_multiple, depth_multiple, max_channels)
    g = GraphBuilder(name, seed, opset)
    p3 = stem_to_p3(g, image_size, ch, rep)
    p4 = _c2f(g, _scdown(g, p3, ch(512)), ch(512), rep(6), True)
    x = _scdown(g, p4, ch(1024))
    x = _c2fcib(g, x, ch(1024), rep(3)) if cib_backbone else _c2f(g, x, ch(1024), rep(3), True)
    p5 = _c2psa(g, _sppf(g, x, ch(1024), "silu"), 1)

    h13 = _c2f(g, g.concat([g.resize_nearest(p5, 2), p4]), ch(512), rep(3), False)
    out_p3 = _c2f(g, g.concat([g.resize_nearest(h13, 2), p3]), ch(256), rep(3), False)
    out_p4 = _c2f(g, g.concat([_conv(g, out_p3, ch(256), 3, 2), h13]), ch(512), rep(3), False)
    out_p5 = _c2fcib(g, g.concat([_scdown(g, out_p4, ch(512)), p5]), ch(1024), rep(3))

    detect_head(g, [out_p3, out_p4, out_p5], ch(256), num_classes,
                lambda g, x, c: _dw_separable(g, _dw_separable(g, x, c), c))
    return g.build()
