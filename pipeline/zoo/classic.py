"""More classifiers at their published sizes, for comparisons with published board figures
(the Coral Edge TPU benchmark table lists them): MobileNet v1, VGG-16, GoogLeNet
(Inception v1). Layer for layer as Keras / torchvision build them."""

from __future__ import annotations

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.cnn import _classifier_head, _conv_bn

# (output channels, stride) of the 13 depthwise-separable blocks: Howard et al. 2017, Table 1.
_MOBILENET_V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                        (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


def mobilenet_v1(seed: int, opset: int, num_classes: int = 1000, image_size: int = 224,
                 width: float = 1.0) -> onnx.ModelProto:
    """MobileNet v1 (Keras ``MobileNet``: Conv-BN-ReLU6, 4,231,976 trainable params at width
    1.0); ``width`` is the paper's multiplier alpha (every layer's channels x alpha, as
    Keras rounds them: ``int(c * alpha)``), 0.25 the thin variant face detectors use."""
    g = GraphBuilder("mobilenet_v1", seed, opset)
    x = _conv_bn(g, g.input("input", (1, 3, image_size, image_size)), int(32 * width), 3, 2,
                 act="relu6")
    for cout, stride in _MOBILENET_V1_BLOCKS:
        cin = g.shape[x][1]
        x = _conv_bn(g, x, cin, 3, stride, groups=cin, act="relu6")
        x = _conv_bn(g, x, int(cout * width), 1, act="relu6")
    _classifier_head(g, x, num_classes)
    return g.build()


def vgg16(seed: int, opset: int, num_classes: int = 1000, image_size: int = 224
          ) -> onnx.ModelProto:
    """VGG-16 (configuration D of Simonyan & Zisserman 2015; torchvision ``vgg16``)."""
    g = GraphBuilder("vgg16", seed, opset)
    x = g.input("input", (1, 3, image_size, image_size))
    for cout, repeats in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
        for _ in range(repeats):
            x = g.relu(g.conv(x, cout, 3, bias=True))
        x = g.maxpool(x, 2, 2, 0)
    x = g.flatten(x)
    x = g.relu(g.gemm(x, 4096))
    x = g.relu(g.gemm(x, 4096))
    g.output(g.gemm(x, num_classes))
    return g.build()


# (1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool projection): Szegedy et al. 2015,
# Table 1; the "5x5" branch is a 3x3 convolution in torchvision and TF-slim.
_INCEPTION = {"3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
              "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
              "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
              "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
              "5b": (384, 192, 384, 48, 128, 128)}


def _inception(g: GraphBuilder, x: str, widths: tuple[int, ...]) -> str:
    c1, r3, c3, r5, c5, pool = widths
    b1 = _conv_bn(g, x, c1, 1)
    b2 = _conv_bn(g, _conv_bn(g, x, r3, 1), c3, 3)
    b3 = _conv_bn(g, _conv_bn(g, x, r5, 1), c5, 3)
    b4 = _conv_bn(g, g.maxpool(x, 3, 1, 1), pool, 1)
    return g.concat([b1, b2, b3, b4])


def inception_v1(seed: int, opset: int, num_classes: int = 1000, image_size: int = 224
                 ) -> onnx.ModelProto:
    """GoogLeNet with batch norm (torchvision ``googlenet`` without the auxiliary heads).
    Its ceil-mode max pools are written as padded floor-mode pools of the same size."""
    g = GraphBuilder("inception_v1", seed, opset)
    x = _conv_bn(g, g.input("input", (1, 3, image_size, image_size)), 64, 7, 2, pad=3)
    x = g.maxpool(x, 3, 2, 1)
    x = _conv_bn(g, _conv_bn(g, x, 64, 1), 192, 3)
    x = g.maxpool(x, 3, 2, 1)
    for name in ("3a", "3b"):
        x = _inception(g, x, _INCEPTION[name])
    x = g.maxpool(x, 3, 2, 1)
    for name in ("4a", "4b", "4c", "4d", "4e"):
        x = _inception(g, x, _INCEPTION[name])
    x = g.maxpool(x, 2, 2, 0)
    for name in ("5a", "5b"):
        x = _inception(g, x, _INCEPTION[name])
    _classifier_head(g, x, num_classes)
    return g.build()
