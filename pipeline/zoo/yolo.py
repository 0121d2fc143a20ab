"""YOLOv5s (ultralytics v6.0 yolov5s.yaml: depth 0.33, width 0.50) up to the Detect convs.

Conv = Conv2d(no bias) + BN + SiLU, the SiLU exported as ``x * sigmoid(x)``; the neck
upsamples with nearest Resize and joins with Concat; the head is three 1x1 convs whose
outputs are reshaped to (1, 3, H, W, 85) and passed through Sigmoid, as the ultralytics
ONNX export does before box decoding (the grid decode is left out: it is post-processing).
"""

from __future__ import annotations

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.cnn import _conv_bn


def _conv(g: GraphBuilder, x: str, cout: int, k: int = 1, s: int = 1, gamma: float = 1.0,
          pad: int | None = None) -> str:
    return _conv_bn(g, x, cout, k, s, act="silu", gamma=gamma, pad=pad)


def _c3(g: GraphBuilder, x: str, cout: int, n: int, shortcut: bool = True) -> str:
    hidden = cout // 2
    y = _conv(g, x, hidden)
    for _ in range(n):
        z = _conv(g, _conv(g, y, hidden), hidden, 3, gamma=0.3 if shortcut else 1.0)
        y = g.add(y, z) if shortcut else z
    return _conv(g, g.concat([y, _conv(g, x, hidden)]), cout)


def _sppf(g: GraphBuilder, x: str, cout: int) -> str:
    x = _conv(g, x, g.shape[x][1] // 2)
    y1 = g.maxpool(x, 5, 1, 2)
    y2 = g.maxpool(y1, 5, 1, 2)
    y3 = g.maxpool(y2, 5, 1, 2)
    return _conv(g, g.concat([x, y1, y2, y3]), cout)


def yolov5s(seed: int, opset: int, num_classes: int = 80, image_size: int = 640
            ) -> onnx.ModelProto:
    g = GraphBuilder("yolov5s", seed, opset)
    x = _conv(g, g.input("images", (1, 3, image_size, image_size)), 32, 6, 2, pad=2)
    x = _c3(g, _conv(g, x, 64, 3, 2), 64, 1)
    p3 = _c3(g, _conv(g, x, 128, 3, 2), 128, 2)
    p4 = _c3(g, _conv(g, p3, 256, 3, 2), 256, 3)
    x = _sppf(g, _c3(g, _conv(g, p4, 512, 3, 2), 512, 1), 512)

    h10 = _conv(g, x, 256)
    x = _c3(g, g.concat([g.resize_nearest(h10, 2), p4]), 256, 1, shortcut=False)
    h14 = _conv(g, x, 128)
    out_p3 = _c3(g, g.concat([g.resize_nearest(h14, 2), p3]), 128, 1, shortcut=False)
    out_p4 = _c3(g, g.concat([_conv(g, out_p3, 128, 3, 2), h14]), 256, 1, shortcut=False)
    out_p5 = _c3(g, g.concat([_conv(g, out_p4, 256, 3, 2), h10]), 512, 1, shortcut=False)

    per_anchor = num_classes + 5
    for feat in (out_p3, out_p4, out_p5):
        y = g.conv(feat, 3 * per_anchor, 1, bias=True)
        _, _, h, w = g.shape[y]
        y = g.transpose(g.reshape(y, (1, 3, per_anchor, h, w)), (0, 1, 3, 4, 2))
        g.output(g.sigmoid(y))
    return g.build()
