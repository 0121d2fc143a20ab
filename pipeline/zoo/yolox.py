"""YOLOX (Megvii-BaseDetection/YOLOX ``yolox/models``) as rknn_model_zoo exports it.

BaseConv = Conv2d(no bias) + BN + SiLU. The stem is ``Focus`` (four stride-2 slices
concatenated, then a 3x3 conv); CSPDarknet's CSP layers are YOLOv5's C3 (two 1x1 branches,
n bottlenecks on the first, concat, 1x1); SPP max-pools 5, 9 and 13 in parallel; the PAFPN
neck is YOLOv5's. The decoupled head, per scale: a 1x1 stem to 256 x width channels, two
3x3 convs then a 1x1 to the classes, two 3x3 convs then 1x1s to the 4 box and 1 objectness
channels; rknn_model_zoo (airockchip/YOLOX, examples/yolox/README.md) keeps the export's
``cat([box, sigmoid(obj), sigmoid(cls)])`` per scale, (1, 85, H, W), and cuts the rest.
"""

from __future__ import annotations

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.yolo import _c3, _conv


def _spp(g: GraphBuilder, x: str, cout: int) -> str:
    x = _conv(g, x, g.shape[x][1] // 2)
    pools = [g.maxpool(x, k, 1, k // 2) for k in (5, 9, 13)]
    return _conv(g, g.concat([x, *pools]), cout)


def yolox(seed: int, opset: int, depth: float = 0.33, width: float = 0.50,
          num_classes: int = 80, image_size: int = 640, name: str = "yolox_s"
          ) -> onnx.ModelProto:
    """YOLOX at any size: s (0.33, 0.50), m (0.67, 0.75), l (1.0, 1.0); channels =
    int(c x width), repeats = max(round(n x depth), 1)."""

    def ch(c: int) -> int:
        return int(c * width)

    def rep(n: int) -> int:
        return max(round(n * depth), 1)

    g = GraphBuilder(name, seed, opset)
    x = _conv(g, g.space_to_depth_slices(g.input("images", (1, 3, image_size, image_size))),
              ch(64), 3)
    x = _c3(g, _conv(g, x, ch(128), 3, 2), ch(128), rep(3), "silu")
    c3 = _c3(g, _conv(g, x, ch(256), 3, 2), ch(256), rep(9), "silu")
    c4 = _c3(g, _conv(g, c3, ch(512), 3, 2), ch(512), rep(9), "silu")
    c5 = _c3(g, _spp(g, _conv(g, c4, ch(1024), 3, 2), ch(1024)), ch(1024), rep(3), "silu",
             shortcut=False)

    fpn0 = _conv(g, c5, ch(512))
    f4 = _c3(g, g.concat([g.resize_nearest(fpn0, 2), c4]), ch(512), rep(3), "silu",
             shortcut=False)
    fpn1 = _conv(g, f4, ch(256))
    pan2 = _c3(g, g.concat([g.resize_nearest(fpn1, 2), c3]), ch(256), rep(3), "silu",
               shortcut=False)
    pan1 = _c3(g, g.concat([_conv(g, pan2, ch(256), 3, 2), fpn1]), ch(512), rep(3), "silu",
               shortcut=False)
    pan0 = _c3(g, g.concat([_conv(g, pan1, ch(512), 3, 2), fpn0]), ch(1024), rep(3), "silu",
               shortcut=False)

    hidden = ch(256)
    for feat in (pan2, pan1, pan0):
        stem = _conv(g, feat, hidden)
        cls = _conv(g, _conv(g, stem, hidden, 3), hidden, 3)
        reg = _conv(g, _conv(g, stem, hidden, 3), hidden, 3)
        box = g.conv(reg, 4, 1, bias=True)
        obj = g.sigmoid(g.conv(reg, 1, 1, bias=True))
        g.output(g.concat([box, obj, g.sigmoid(g.conv(cls, num_classes, 1, bias=True))]))
    return g.build()
