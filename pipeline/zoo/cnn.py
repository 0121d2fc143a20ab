"""Convolutional classifiers at their published sizes, layer for layer as torchvision builds
them (so parameter counts match torchvision exactly and MACs match the papers)."""

from __future__ import annotations

import onnx

from pipeline.zoo.builder import GraphBuilder

# (expansion t, channels c, repeats n, first stride s): Sandler et al., CVPR 2018, Table 2.
_MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _conv_bn(g: GraphBuilder, x: str, cout: int, k: int, stride: int = 1, groups: int = 1,
             act: str | None = "relu", gamma: float = 1.0, pad: int | None = None) -> str:
    y = g.batchnorm(g.conv(x, cout, k, stride, pad=pad, groups=groups), gamma_scale=gamma)
    if act == "relu":
        return g.relu(y)
    if act == "relu6":
        return g.relu6(y)
    if act == "silu":
        return g.silu(y)
    if act == "leaky":
        return g.leaky_relu(y, 0.1)
    return y


def _classifier_head(g: GraphBuilder, x: str, num_classes: int) -> None:
    g.output(g.gemm(g.flatten(g.global_avg_pool(x)), num_classes))


def mobilenet_v2(seed: int, opset: int, num_classes: int = 1000, image_size: int = 224
                 ) -> onnx.ModelProto:
    g = GraphBuilder("mobilenet_v2", seed, opset)
    x = _conv_bn(g, g.input("input", (1, 3, image_size, image_size)), 32, 3, 2, act="relu6")
    cin = 32
    for t, c, n, s in _MOBILENET_V2_BLOCKS:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = _conv_bn(g, x, hidden, 1, act="relu6") if t != 1 else x
            y = _conv_bn(g, y, hidden, 3, stride, groups=hidden, act="relu6")
            residual = stride == 1 and cin == c
            y = _conv_bn(g, y, c, 1, act=None, gamma=0.3 if residual else 1.0)
            x = g.add(x, y) if residual else y
            cin = c
    x = _conv_bn(g, x, 1280, 1, act="relu6")
    _classifier_head(g, x, num_classes)
    return g.build()


def _basic_block(g: GraphBuilder, x: str, planes: int, stride: int) -> str:
    cin = g.shape[x][1]
    y = _conv_bn(g, x, planes, 3, stride)
    y = _conv_bn(g, y, planes, 3, act=None, gamma=0.3)
    if stride != 1 or cin != planes:
        x = _conv_bn(g, x, planes, 1, stride, act=None)
    return g.relu(g.add(y, x))


def _bottleneck(g: GraphBuilder, x: str, planes: int, stride: int) -> str:
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 conv, as in torchvision."""
    cin = g.shape[x][1]
    y = _conv_bn(g, x, planes, 1)
    y = _conv_bn(g, y, planes, 3, stride)
    y = _conv_bn(g, y, planes * 4, 1, act=None, gamma=0.3)
    if stride != 1 or cin != planes * 4:
        x = _conv_bn(g, x, planes * 4, 1, stride, act=None)
    return g.relu(g.add(y, x))


def resnet(depth: int, seed: int, opset: int, num_classes: int = 1000, image_size: int = 224
           ) -> onnx.ModelProto:
    blocks = {18: (_basic_block, (2, 2, 2, 2)), 34: (_basic_block, (3, 4, 6, 3)),
              50: (_bottleneck, (3, 4, 6, 3)), 101: (_bottleneck, (3, 4, 23, 3)),
              152: (_bottleneck, (3, 8, 36, 3))}
    if depth not in blocks:
        raise ValueError(f"model.params.depth: ResNet depth must be one of {sorted(blocks)}")
    block, repeats = blocks[depth]
    g = GraphBuilder(f"resnet{depth}", seed, opset)
    x = _conv_bn(g, g.input("input", (1, 3, image_size, image_size)), 64, 7, 2, pad=3)
    x = g.maxpool(x, 3, 2, 1)
    for stage, n in enumerate(repeats):
        planes = 64 * 2**stage
        for i in range(n):
            x = block(g, x, planes, 2 if (i == 0 and stage > 0) else 1)
    _classifier_head(g, x, num_classes)
    return g.build()


def resnet18(seed: int, opset: int, **params) -> onnx.ModelProto:
    return resnet(18, seed, opset, **params)


def resnet50(seed: int, opset: int, **params) -> onnx.ModelProto:
    return resnet(50, seed, opset, **params)


def resnet152(seed: int, opset: int, **params) -> onnx.ModelProto:
    return resnet(152, seed, opset, **params)
