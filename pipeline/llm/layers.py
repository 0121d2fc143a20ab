"""The graph primitives a decoder block is written in: the norm, rotary embeddings, the
split into heads, a reshape that is not emitted when it would change nothing.

Norms are ``LayerNormalization`` with a zero bias: RMSNorm (opset 23) has the same operands
and the same per-element work, minus one subtraction, and every tool this graph passes
through (onnxslim, onnxruntime's quantizer, the compiler's op rules) knows LayerNorm.
Rotary embeddings are built as exporters write them: ``x * cos + rotate_half(x) * sin``.
"""

from __future__ import annotations

import numpy as np

from pipeline.zoo.builder import GraphBuilder


def reshape_to(g: GraphBuilder, x: str, shape: tuple[int, ...]) -> str:
    """A Reshape, or ``x`` itself when it has the shape already (one query head per key
    head): no node a cleanup pass would only delete."""
    return x if g.shape[x] == tuple(shape) else g.reshape(x, shape)


def norm(g: GraphBuilder, x: str, gain: str, zero: str) -> str:
    return g._node("LayerNormalization", [x, gain, zero], g.shape[x], axis=-1, epsilon=1e-6)


def rope_tables(d: int, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of the rotary angles at positions ``start .. start + count - 1``
    (base 10000, the two halves of a head sharing each frequency)."""
    inv = 1.0 / (10000 ** (np.arange(0, d, 2, dtype=np.float64) / d))
    angles = np.outer(np.arange(start, start + count), inv)
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rotate(g: GraphBuilder, x: str, start: int) -> str:
    """``x * cos + rotate_half(x) * sin`` at positions ``start ..`` (x: [1, heads, S, d])."""
    _, _, s, d = g.shape[x]
    cos_table, sin_table = rope_tables(d, start, s)
    cos, sin = g.const("rope_cos", cos_table), g.const("rope_sin", sin_table)
    first, second = g.split(x, [d // 2, d // 2], axis=-1)
    rotated = g.concat([g._node("Neg", [second], g.shape[second]), first], axis=-1)
    return g.add(g.mul(x, cos), g.mul(rotated, sin))


def split_heads(g: GraphBuilder, x: str, heads: int, d: int) -> str:
    """[1, S, heads * d] -> [1, heads, S, d] (one position or one head: a Reshape alone,
    the form onnxslim would leave)."""
    s = g.shape[x][1]
    if s == 1 or heads == 1:
        return g.reshape(x, (1, heads, s, d))
    return g.transpose(g.reshape(x, (1, s, heads, d)), (0, 2, 1, 3))
