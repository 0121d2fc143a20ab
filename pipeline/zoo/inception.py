"""Inception v4 (Szegedy, Ioffe, Vanhoucke & Alemi, "Inception-v4, Inception-ResNet and the
Impact of Residual Connections on Learning", AAAI 2017, Figures 3-9) at 299x299: the stem,
4 Inception-A, Reduction-A, 7 Inception-B, Reduction-B, 3 Inception-C, global average
pool and the classifier; every convolution Conv-BN-ReLU without bias, as TF-slim's
``inception_v4`` and timm's ``inception_v4`` build it (42,679,816 parameters with 1000
classes). Coral's Edge TPU benchmark table has it; its 7x1 / 1x7 and 3x1 / 1x3
factorised convolutions and 43 M parameters (five times the Edge TPU's 8 MB cache) are
what the other zoo classifiers lack."""

from __future__ import annotations

import onnx

from pipeline.zoo.builder import GraphBuilder
from pipeline.zoo.cnn import _classifier_head

Kernel = int | tuple[int, int]


def _cbr(g: GraphBuilder, x: str, cout: int, k: Kernel, stride: int = 1,
         valid: bool = False) -> str:
    """Conv-BN-ReLU; ``valid``: no padding (the paper's "V" layers), else "same"."""
    return g.relu(g.batchnorm(g.conv(x, cout, k, stride, pad=0 if valid else None)))


def _chain(g: GraphBuilder, x: str, *layers: tuple[int, Kernel]) -> str:
    for cout, k in layers:
        x = _cbr(g, x, cout, k)
    return x


def _stem(g: GraphBuilder, x: str) -> str:
    """Figure 3: 299x299x3 -> 35x35x384."""
    x = _cbr(g, _cbr(g, _cbr(g, x, 32, 3, 2, valid=True), 32, 3, valid=True), 64, 3)
    x = g.concat([g.maxpool(x, 3, 2, 0), _cbr(g, x, 96, 3, 2, valid=True)])
    left = _cbr(g, _cbr(g, x, 64, 1), 96, 3, valid=True)
    right = _cbr(g, _chain(g, x, (64, 1), (64, (7, 1)), (64, (1, 7))), 96, 3, valid=True)
    x = g.concat([left, right])
    return g.concat([_cbr(g, x, 192, 3, 2, valid=True), g.maxpool(x, 3, 2, 0)])


def _block_a(g: GraphBuilder, x: str) -> str:
    """Figure 4, 35x35x384."""
    return g.concat([_cbr(g, x, 96, 1),
                     _chain(g, x, (64, 1), (96, 3)),
                     _chain(g, x, (64, 1), (96, 3), (96, 3)),
                     _cbr(g, g.avgpool(x, 3, 1, 1), 96, 1)])


def _reduction_a(g: GraphBuilder, x: str) -> str:
    """Figure 7 with k, l, m, n = 192, 224, 256, 384: 35x35 -> 17x17x1024."""
    return g.concat([_cbr(g, x, 384, 3, 2, valid=True),
                     _cbr(g, _chain(g, x, (192, 1), (224, 3)), 256, 3, 2, valid=True),
                     g.maxpool(x, 3, 2, 0)])


def _block_b(g: GraphBuilder, x: str) -> str:
    """Figure 5, 17x17x1024."""
    return g.concat([_cbr(g, x, 384, 1),
                     _chain(g, x, (192, 1), (224, (1, 7)), (256, (7, 1))),
                     _chain(g, x, (192, 1), (192, (7, 1)), (224, (1, 7)), (224, (7, 1)),
                            (256, (1, 7))),
                     _cbr(g, g.avgpool(x, 3, 1, 1), 128, 1)])


def _reduction_b(g: GraphBuilder, x: str) -> str:
    """Figure 8: 17x17 -> 8x8x1536."""
    return g.concat([_cbr(g, _cbr(g, x, 192, 1), 192, 3, 2, valid=True),
                     _cbr(g, _chain(g, x, (256, 1), (256, (1, 7)), (320, (7, 1))), 320, 3, 2,
                          valid=True),
                     g.maxpool(x, 3, 2, 0)])


def _block_c(g: GraphBuilder, x: str) -> str:
    """Figure 6, 8x8x1536: two branches split into a 1x3 and a 3x1 convolution each."""
    mid = _cbr(g, x, 384, 1)
    deep = _chain(g, x, (384, 1), (448, (3, 1)), (512, (1, 3)))
    return g.concat([_cbr(g, x, 256, 1),
                     _cbr(g, mid, 256, (1, 3)), _cbr(g, mid, 256, (3, 1)),
                     _cbr(g, deep, 256, (1, 3)), _cbr(g, deep, 256, (3, 1)),
                     _cbr(g, g.avgpool(x, 3, 1, 1), 256, 1)])


def inception_v4(seed: int, opset: int, num_classes: int = 1000, image_size: int = 299
                 ) -> onnx.ModelProto:
    g = GraphBuilder("inception_v4", seed, opset)
    x = _stem(g, g.input("input", (1, 3, image_size, image_size)))
    for _ in range(4):
        x = _block_a(g, x)
    x = _reduction_a(g, x)
    for _ in range(7):
        x = _block_b(g, x)
    x = _reduction_b(g, x)
    for _ in range(3):
        x = _block_c(g, x)
    _classifier_head(g, x, num_classes)
    return g.build()
