"""YOLOv8 (ultralytics 8.0 ``yolov8.yaml``) as rknn_model_zoo exports it for its RK3588 table.

Conv = Conv2d(no bias) + BN + SiLU. C2f splits a 1x1 conv's output in two, runs n
bottlenecks (two 3x3 convs, residual in the backbone) on the second half and concatenates
every intermediate before a 1x1 conv; SPPF is three chained 5x5 max-pools. The Detect head
per scale is a box branch (3x3, 3x3, 1x1 to 4 x reg_max = 64 channels) and a class branch
(3x3, 3x3, 1x1 to 80, then Sigmoid). rknn_model_zoo (airockchip/ultralytics_yolov8, see
examples/yolov8/README.md) cuts the graph there: DFL and box decoding move to
post-processing, and a ReduceSum + Clip branch adds the per-pixel class-score sum, so each
scale has outputs (1,64,H,W), (1,80,H,W), (1,1,H,W).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.cnn import _conv_bn
from pipeline.zoo.yolo import _sppf

REG_MAX = 16


def _conv(g: GraphBuilder, x: str, cout: int, k: int = 1, s: int = 1, gamma: float = 1.0
          ) -> str:
    return _conv_bn(g, x, cout, k, s, act="silu", gamma=gamma)


def _c2f(g: GraphBuilder, x: str, cout: int, n: int, shortcut: bool) -> str:
    hidden = cout // 2
    parts = g.split(_conv(g, x, 2 * hidden), [hidden, hidden])
    for _ in range(n):
        y = _conv(g, _conv(g, parts[-1], hidden, 3), hidden, 3, gamma=0.3 if shortcut else 1.0)
        parts.append(g.add(parts[-1], y) if shortcut else y)
    return _conv(g, g.concat(parts), cout)


def _plain_class_branch(g: GraphBuilder, x: str, cout: int) -> str:
    return _conv(g, _conv(g, x, cout, 3), cout, 3)


def detect_head(g: GraphBuilder, feats: list[str], width: int, num_classes: int,
                class_branch: Callable[[GraphBuilder, str, int], str]) -> None:
    """The Detect head as rknn_model_zoo cuts it, per scale: box branch to 4 x reg_max
    channels, ``class_branch`` then a 1x1 conv and Sigmoid, and the clipped score sum.
    ``width``: the first scale's channels (ultralytics' ch[0])."""
    box_ch = max(16, width // 4, 4 * REG_MAX)
    cls_ch = max(width, min(num_classes, 100))
    for feat in feats:
        box = _conv(g, _conv(g, feat, box_ch, 3), box_ch, 3)
        g.output(g.conv(box, 4 * REG_MAX, 1, bias=True))
        cls = g.sigmoid(g.conv(class_branch(g, feat, cls_ch), num_classes, 1, bias=True))
        g.output(cls)
        g.output(g.channel_sum_clipped(cls))


def scaling(width_multiple: float, depth_multiple: float, max_channels: int
            ) -> tuple[Callable[[int], int], Callable[[int], int]]:
    """ultralytics' model scaling (``parse_model``): channels = ceil(min(c, max_channels) x
    width / 8) x 8, repeats = max(round(n x depth), 1)."""

    def ch(c: int) -> int:
        return math.ceil(min(c, max_channels) * width_multiple / 8) * 8

    def rep(n: int) -> int:
        return max(round(n * depth_multiple), 1)

    return ch, rep


def stem_to_p3(g: GraphBuilder, image_size: int, ch: Callable[[int], int],
               rep: Callable[[int], int]) -> str:
    """The YOLOv8 backbone up to P3 (stride 8), which YOLOv10 shares."""
    x = _conv(g, g.input("images", (1, 3, image_size, image_size)), ch(64), 3, 2)
    x = _c2f(g, _conv(g, x, ch(128), 3, 2), ch(128), rep(3), True)
    return _c2f(g, _conv(g, x, ch(256), 3, 2), ch(256), rep(6), True)


def yolov8(seed: int, opset: int, depth_multiple: float = 0.33, width_multiple: float = 0.25,
           max_channels: int = 1024, num_classes: int = 80, image_size: int = 640,
           name: str = "yolov8n") -> onnx.ModelProto:
    """YOLOv8 at any scale: n (0.33, 0.25, 1024), s (0.33, 0.50, 1024), m (0.67, 0.75, 768)
    in ``yolov8.yaml``, scaled as ``scaling`` says."""
    ch, rep = scaling(width_multiple, depth_multiple, max_channels)
    g = GraphBuilder(name, seed, opset)
    p3 = stem_to_p3(g, image_size, ch, rep)
    p4 = _c2f(g, _conv(g, p3, ch(512), 3, 2), ch(512), rep(6), True)
    p5 = _sppf(g, _c2f(g, _conv(g, p4, ch(1024), 3, 2), ch(1024), rep(3), True), ch(1024),
               "silu")

    h12 = _c2f(g, g.concat([g.resize_nearest(p5, 2), p4]), ch(512), rep(3), False)
    out_p3 = _c2f(g, g.concat([g.resize_nearest(h12, 2), p3]), ch(256), rep(3), False)
    out_p4 = _c2f(g, g.concat([_conv(g, out_p3, ch(256), 3, 2), h12]), ch(512), rep(3), False)
    out_p5 = _c2f(g, g.concat([_conv(g, out_p4, ch(512), 3, 2), p5]), ch(1024), rep(3), False)

    detect_head(g, [out_p3, out_p4, out_p5], ch(256), num_classes, _plain_class_branch)
    return g.build()
