"""One BERT-base encoder layer (Devlin et al. 2019; hidden 768, 12 heads, FFN 3072), built
as torch.onnx exports it at opset 17: MatMul + Add projections, Reshape/Transpose to heads,
Softmax attention, LayerNormalization, and GELU as the five-node Erf pattern."""

from __future__ import annotations

import math

import onnx

from pipeline.zoo.builder import GraphBuilder


def bert_encoder(seed: int, opset: int, seq_len: int = 128, hidden: int = 768, heads: int = 12,
                 ffn: int = 3072) -> onnx.ModelProto:
    g = GraphBuilder("bert_encoder", seed, opset)
    x = g.input("hidden_states", (1, seq_len, hidden))
    head_dim = hidden // heads

    def split_heads(t: str) -> str:
        return g.transpose(g.reshape(t, (1, seq_len, heads, head_dim)), (0, 2, 1, 3))

    q = split_heads(g.linear(x, hidden))
    k = g.transpose(g.reshape(g.linear(x, hidden), (1, seq_len, heads, head_dim)), (0, 2, 3, 1))
    v = split_heads(g.linear(x, hidden))
    scores = g.scale(g.matmul(q, k), 1.0 / math.sqrt(head_dim))
    context = g.matmul(g.softmax(scores, axis=-1), v)
    context = g.reshape(g.transpose(context, (0, 2, 1, 3)), (1, seq_len, hidden))
    x = g.layernorm(g.add(x, g.linear(context, hidden)))
    y = g.linear(g.gelu_erf(g.linear(x, ffn)), hidden)
    g.output(g.layernorm(g.add(x, y)))
    return g.build()
