"""YOLOv5 (ultralytics v6.0 yolov5{n,s,m}.yaml) up to the Detect convs.

Conv = Conv2d(no bias) + BN + SiLU, the SiLU exported as ``x * sigmoid(x)``; the neck
upsamples with nearest Resize and joins with Concat; the head is three 1x1 convs, each
followed by a Sigmoid, with outputs (1, 255, H, W): the network as rknn_model_zoo exports
it for its tables (airockchip/yolov5, examples/yolov5/README.md: the ultralytics export's
reshape to (1, 3, H, W, 85), permute and grid decode move to post-processing, the Sigmoid
stays on the conv).
"""

from __future__ import annotations

import math

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.cnn import _conv_bn


def _conv(g: GraphBuilder, x: str, cout: int, k: int = 1, s: int = 1, gamma: float = 1.0,
          pad: int | None = None, act: str = "silu") -> str:
    return _conv_bn(g, x, cout, k, s, act=act, gamma=gamma, pad=pad)


def _c3(g: GraphBuilder, x: str, cout: int, n: int, act: str, shortcut: bool = True) -> str:
    hidden = cout // 2
    y = _conv(g, x, hidden, act=act)
    for _ in range(n):
        z = _conv(g, _conv(g, y, hidden, act=act), hidden, 3, gamma=0.3 if shortcut else 1.0,
                  act=act)
        y = g.add(y, z) if shortcut else z
    return _conv(g, g.concat([y, _conv(g, x, hidden, act=act)]), cout, act=act)


def _sppf(g: GraphBuilder, x: str, cout: int, act: str) -> str:
    x = _conv(g, x, g.shape[x][1] // 2, act=act)
    y1 = g.maxpool(x, 5, 1, 2)
    y2 = g.maxpool(y1, 5, 1, 2)
    y3 = g.maxpool(y2, 5, 1, 2)
    return _conv(g, g.concat([x, y1, y2, y3]), cout, act=act)


def yolov5(seed: int, opset: int, depth_multiple: float = 0.33, width_multiple: float = 0.50,
           act: str = "silu", num_classes: int = 80, image_size: int = 640,
           name: str = "yolov5") -> onnx.ModelProto:
    """YOLOv5 v6.0 at any size: ``yolov5{n,s,m,l,x}.yaml`` differ only in the depth and width
    multiples (repeats = max(round(n x depth), 1); channels rounded up to a multiple of 8).
    ``act``: ``silu`` (the release) or ``relu`` (rknn_model_zoo's ``yolov5s_relu``)."""
    if act not in ("silu", "relu"):
        raise ValueError(f"act must be 'silu' or 'relu', got {act!r}")

    def ch(c: int) -> int:
        return math.ceil(c * width_multiple / 8) * 8

    def rep(n: int) -> int:
        return max(round(n * depth_multiple), 1)

    g = GraphBuilder(name, seed, opset)
    x = _conv(g, g.input("images", (1, 3, image_size, image_size)), ch(64), 6, 2, pad=2,
              act=act)
    x = _c3(g, _conv(g, x, ch(128), 3, 2, act=act), ch(128), rep(3), act)
    p3 = _c3(g, _conv(g, x, ch(256), 3, 2, act=act), ch(256), rep(6), act)
    p4 = _c3(g, _conv(g, p3, ch(512), 3, 2, act=act), ch(512), rep(9), act)
    x = _sppf(g, _c3(g, _conv(g, p4, ch(1024), 3, 2, act=act), ch(1024), rep(3), act),
              ch(1024), act)

    h10 = _conv(g, x, ch(512), act=act)
    x = _c3(g, g.concat([g.resize_nearest(h10, 2), p4]), ch(512), rep(3), act, shortcut=False)
    h14 = _conv(g, x, ch(256), act=act)
    out_p3 = _c3(g, g.concat([g.resize_nearest(h14, 2), p3]), ch(256), rep(3), act,
                 shortcut=False)
    out_p4 = _c3(g, g.concat([_conv(g, out_p3, ch(256), 3, 2, act=act), h14]), ch(512),
                 rep(3), act, shortcut=False)
    out_p5 = _c3(g, g.concat([_conv(g, out_p4, ch(512), 3, 2, act=act), h10]), ch(1024),
                 rep(3), act, shortcut=False)

    per_anchor = num_classes + 5
    for feat in (out_p3, out_p4, out_p5):
        g.output(g.sigmoid(g.conv(feat, 3 * per_anchor, 1, bias=True)))
    return g.build()


def yolov5s(seed: int, opset: int, num_classes: int = 80, image_size: int = 640
            ) -> onnx.ModelProto:
    return yolov5(seed, opset, 0.33, 0.50, "silu", num_classes, image_size, "yolov5s")
