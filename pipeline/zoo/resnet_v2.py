"""ResNet-50 v2 (He, Zhang, Ren & Sun, "Identity Mappings in Deep Residual Networks", ECCV
2016): the pre-activation ResNet, as Keras ``ResNet50V2`` and TF-slim ``resnet_v2_50``
build it (25,568,360 trainable parameters with 1000 classes).

Each bottleneck normalises and activates its input before the convolutions (BN + ReLU
first), so the BatchNorm cannot fold into a convolution's weights: a converter leaves it a
per-channel multiply-add of its own, which is what sets this network apart from v1 on an
NPU. The stride sits on the 3x3 convolution of each stage's last block; a strided block
with an identity shortcut subsamples it with a 1x1 max pool. Coral's Edge TPU benchmark
table lists it at 299x299.
"""

from __future__ import annotations

import onnx

from pipeline.zoo.builder import GraphBuilder


def _preact(g: GraphBuilder, x: str) -> str:
    return g.relu(g.batchnorm(x))


def _block(g: GraphBuilder, x: str, filters: int, stride: int, conv_shortcut: bool) -> str:
    preact = _preact(g, x)
    if conv_shortcut:
        shortcut = g.conv(preact, 4 * filters, 1, stride, bias=True)
    else:
        shortcut = g.maxpool(x, 1, stride, 0) if stride > 1 else x
    y = _preact(g, g.conv(preact, filters, 1))
    y = _preact(g, g.conv(y, filters, 3, stride, pad=1))
    return g.add(shortcut, g.conv(y, 4 * filters, 1, bias=True))


def resnet50_v2(seed: int, opset: int, num_classes: int = 1000, image_size: int = 224
                ) -> onnx.ModelProto:
    g = GraphBuilder("resnet50_v2", seed, opset)
    x = g.conv(g.input("input", (1, 3, image_size, image_size)), 64, 7, 2, pad=3, bias=True)
    x = g.maxpool(x, 3, 2, 1)
    for filters, blocks, last_stride in ((64, 3, 2), (128, 4, 2), (256, 6, 2), (512, 3, 1)):
        x = _block(g, x, filters, 1, conv_shortcut=True)
        for _ in range(blocks - 2):
            x = _block(g, x, filters, 1, conv_shortcut=False)
        x = _block(g, x, filters, last_stride, conv_shortcut=False)
    x = _preact(g, x)
    g.output(g.gemm(g.flatten(g.global_avg_pool(x)), num_classes))
    return g.build()
