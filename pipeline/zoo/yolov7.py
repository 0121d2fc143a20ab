"""YOLOv7-tiny (WongKinYiu/yolov7 ``cfg/deploy/yolov7-tiny.yaml``) as rknn_model_zoo exports it.

Conv = Conv2d(no bias) + BN + LeakyReLU(0.1). The ELAN-tiny block runs two 1x1 convs on
its input, two 3x3 convs chained on the second, concatenates the four and joins them
with a 1x1 conv; downsampling is a 2x2 max-pool in the backbone and a stride-2 3x3 conv
in the neck; SPPCSPC-tiny max-pools 5, 9 and 13 in parallel. rknn_model_zoo
(airockchip/yolov7, examples/yolov7/README.md) cuts the graph after each scale's 1x1
Detect conv: outputs (1, 255, H, W), the implicit add/multiply folded into that conv.
"""

from __future__ import annotations

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.cnn import _conv_bn


def _conv(g: GraphBuilder, x: str, cout: int, k: int = 1, s: int = 1) -> str:
    return _conv_bn(g, x, cout, k, s, act="leaky")


def _elan(g: GraphBuilder, x: str, branch: int, cout: int) -> str:
    a = _conv(g, x, branch)
    b = _conv(g, x, branch)
    c = _conv(g, b, branch, 3)
    d = _conv(g, c, branch, 3)
    return _conv(g, g.concat([d, c, b, a]), cout)


def _sppcspc_tiny(g: GraphBuilder, x: str, cout: int) -> str:
    a = _conv(g, x, cout)
    b = _conv(g, x, cout)
    pools = [g.maxpool(b, k, 1, k // 2) for k in (5, 9, 13)]
    y = _conv(g, g.concat([pools[2], pools[1], pools[0], b]), cout)
    return _conv(g, g.concat([y, a]), cout)


def yolov7_tiny(seed: int, opset: int, num_classes: int = 80, image_size: int = 640
                ) -> onnx.ModelProto:
    g = GraphBuilder("yolov7_tiny", seed, opset)
    x = _conv(g, _conv(g, g.input("images", (1, 3, image_size, image_size)), 32, 3, 2), 64, 3,
              2)
    x = _elan(g, x, 32, 64)
    p3 = _elan(g, g.maxpool(x, 2, 2, 0), 64, 128)
    p4 = _elan(g, g.maxpool(p3, 2, 2, 0), 128, 256)
    x = _elan(g, g.maxpool(p4, 2, 2, 0), 256, 512)
    p5 = _sppcspc_tiny(g, x, 256)

    up = g.resize_nearest(_conv(g, p5, 128), 2)
    h4 = _elan(g, g.concat([up, _conv(g, p4, 128)]), 64, 128)
    up = g.resize_nearest(_conv(g, h4, 64), 2)
    out3 = _elan(g, g.concat([up, _conv(g, p3, 64)]), 32, 64)
    out4 = _elan(g, g.concat([_conv(g, out3, 128, 3, 2), h4]), 64, 128)
    out5 = _elan(g, g.concat([_conv(g, out4, 256, 3, 2), p5]), 128, 256)

    for feat, width in ((out3, 128), (out4, 256), (out5, 512)):
        g.output(g.conv(_conv(g, feat, width, 3), 3 * (num_classes + 5), 1, bias=True))
    return g.build()
