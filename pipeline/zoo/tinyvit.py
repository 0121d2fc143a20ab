"""MobileSAM's image encoder: TinyViT-5M (Wu et al. 2022) as MobileSAM (Zhang et al. 2023)
uses it, at 448 px as airockchip/MobileSAM (e6aceeb) exports it for rknn_model_zoo, and as
torch.onnx writes it at that export's opset 16: a convolutional stem and MBConv stage, three
stages of windowed-attention blocks (a depthwise 3x3 between attention and MLP), stride-2
depthwise patch merging (stride 1 into the 320-wide stage), and a convolutional neck.

What the exporter leaves is kept, since compile judges it: LayerNorm as its nine-node
ReduceMean pattern (opset 16 has no LayerNormalization), GELU as the Erf pattern, each
window's attention bias as a (heads, N, N) constant added to the scaled scores, and the
window partition as Reshape / Transpose / Reshape around every attention."""

from __future__ import annotations

import numpy as np
import onnx

from pipeline.errors import UserError
from pipeline.zoo.builder import GraphBuilder

EMBED_DIMS = (64, 128, 160, 320)
DEPTHS = (2, 2, 6, 2)
HEADS = (2, 4, 5, 10)
WINDOWS = (7, 7, 14, 7)
NECK = 256


def _conv_bn(g: GraphBuilder, x: str, cout: int, k: int, stride: int = 1,
             groups: int = 1) -> str:
    """Conv2d_BN: the exporter folds the BatchNorm into the convolution's bias."""
    return g.conv(x, cout, k, stride=stride, groups=groups, bias=True)


def _mbconv(g: GraphBuilder, x: str, expand: int = 4) -> str:
    c = g.shape[x][1]
    y = g.gelu_erf(_conv_bn(g, x, c * expand, 1))
    y = g.gelu_erf(_conv_bn(g, y, c * expand, 3, groups=c * expand))
    return g.gelu_erf(g.add(_conv_bn(g, y, c, 1), x))


def _patch_merging(g: GraphBuilder, x: str, hw: int, out_dim: int, stride: int) -> str:
    """1x1, depthwise 3x3 at ``stride``, 1x1 (GELU between); tokens in, tokens out."""
    if len(g.shape[x]) == 3:
        x = g.transpose(g.reshape(x, (1, hw, hw, g.shape[x][-1])), (0, 3, 1, 2))
    y = g.gelu_erf(_conv_bn(g, x, out_dim, 1))
    y = g.gelu_erf(_conv_bn(g, y, out_dim, 3, stride=stride, groups=out_dim))
    y = _conv_bn(g, y, out_dim, 1)
    n, c, h, w = g.shape[y]
    return g.transpose(g.reshape(y, (n, c, h * w)), (0, 2, 1))


def _attention(g: GraphBuilder, x: str, heads: int) -> str:
    """TinyViT's attention over one batch of windows: LayerNorm, one qkv projection split
    per head, scaled scores plus the learned relative-position bias, Softmax, projection."""
    windows, tokens, dim = g.shape[x]
    key_dim = dim // heads
    qkv = g.linear(g.layernorm_exported(x), 3 * dim)
    qkv = g.reshape(qkv, (windows, tokens, heads, 3 * key_dim))
    q, k, v = g.split(qkv, [key_dim] * 3, axis=3)
    # k's permute and transpose(-2, -1) leave the exporter as one Transpose
    scores = g.matmul(g.transpose(q, (0, 2, 1, 3)), g.transpose(k, (0, 2, 3, 1)))
    scores = g.scale(scores, key_dim ** -0.5)
    v = g.transpose(v, (0, 2, 1, 3))
    bias = g.const("attn_bias", g.rng.normal(0.0, 0.02, (heads, tokens, tokens))
                   .astype(np.float32))
    attn = g.softmax(g.add(scores, bias), axis=-1)
    out = g.reshape(g.transpose(g.matmul(attn, v), (0, 2, 1, 3)), (windows, tokens, dim))
    return g.linear(out, dim)


def _block(g: GraphBuilder, x: str, hw: int, heads: int, window: int) -> str:
    """Windowed attention (partitioned and merged back), the depthwise local conv, the MLP;
    residuals around attention and MLP."""
    _, tokens, dim = g.shape[x]
    n = hw // window
    y = g.reshape(g.reshape(x, (1, hw, hw, dim)), (1, n, window, n, window, dim))
    y = g.reshape(g.transpose(y, (0, 1, 3, 2, 4, 5)), (n * n, window * window, dim))
    y = _attention(g, y, heads)
    y = g.reshape(y, (1, n, n, window, window, dim))
    y = g.reshape(g.reshape(g.transpose(y, (0, 1, 3, 2, 4, 5)), (1, hw, hw, dim)),
                  (1, tokens, dim))
    x = g.add(x, y)
    y = g.reshape(g.transpose(x, (0, 2, 1)), (1, dim, hw, hw))
    y = _conv_bn(g, y, dim, 3, groups=dim)
    x = g.transpose(g.reshape(y, (1, dim, tokens)), (0, 2, 1))
    mlp = g.linear(g.gelu_erf(g.linear(g.layernorm_exported(x), 4 * dim)), dim)
    return g.add(x, mlp)


def tinyvit_sam(seed: int, opset: int, image_size: int = 448) -> onnx.ModelProto:
    if image_size % 224:
        # every stage's windows tile its map exactly (56 / 7, 28 / 14): TinyViT pads otherwise
        raise UserError(f"model.params.image_size: {image_size} is not a multiple of 224, "
                        "which MobileSAM's windows (7, 14, 7 at 1/8 and 1/16) need")
    g = GraphBuilder("mobilesam_encoder", seed, opset)
    x = g.input("image", (1, 3, image_size, image_size))
    x = _conv_bn(g, g.gelu_erf(_conv_bn(g, x, EMBED_DIMS[0] // 2, 3, stride=2)),
                 EMBED_DIMS[0], 3, stride=2)
    hw = image_size // 4
    for _ in range(DEPTHS[0]):
        x = _mbconv(g, x)
    x = _patch_merging(g, x, hw, EMBED_DIMS[1], stride=2)
    hw //= 2
    for stage in (1, 2, 3):
        for _ in range(DEPTHS[stage]):
            x = _block(g, x, hw, HEADS[stage], WINDOWS[stage])
        if stage < 3:
            # MobileSAM keeps 1/16 of the image: the merge into the 320-wide stage is stride 1
            stride = 1 if EMBED_DIMS[stage + 1] == 320 else 2
            x = _patch_merging(g, x, hw, EMBED_DIMS[stage + 1], stride)
            hw //= stride
    x = g.transpose(g.reshape(x, (1, hw, hw, EMBED_DIMS[3])), (0, 3, 1, 2))
    x = g.layernorm_exported(g.conv(x, NECK, 1), 1, 1e-6)
    g.output(g.layernorm_exported(g.conv(x, NECK, 3), 1, 1e-6))
    return g.build()
