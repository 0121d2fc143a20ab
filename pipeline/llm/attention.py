"""The queries, keys and values of a decoder block: plain (grouped-query) attention, or
DeepSeek-V2's multi-head latent attention."""

from __future__ import annotations

from pipeline.llm.layers import norm, rotate, split_heads
from pipeline.llm.spec import LlmSpec
from pipeline.llm.weights import Weights
from pipeline.zoo.builder import GraphBuilder


def plain_qkv(g: GraphBuilder, w: Weights, spec: LlmSpec, xn: str, past: int
         ) -> tuple[str, str, str]:
    """Queries, keys and values per head ([1, heads, S, d]), rotated and normed as the
    model does."""
    d = spec.head_dim

    def project(weight: str, heads: int, bias: str | None) -> str:
        # the bias is added per head, after the split: the same sum, and a MatMul whose
        # weight every phase shares (a MatMul + Add would be fused into a Gemm per phase)
        y = split_heads(g, g.matmul(xn, weight), heads, d)
        return g.add(y, bias) if bias else y

    q = project(w.q, spec.num_heads, w.bias.get("q"))
    k = project(w.k, spec.num_kv_heads, w.bias.get("k"))
    v = project(w.v, spec.num_kv_heads, w.bias.get("v"))
    if spec.qk_norm:
        q, k = (norm(g, q, w.norms["q_norm"], w.zero_hd),
                norm(g, k, w.norms["k_norm"], w.zero_hd))
    return rotate(g, q, past), rotate(g, k, past), v


def latent_qkv(g: GraphBuilder, w: Weights, spec: LlmSpec, xn: str, past: int
                ) -> tuple[str, str, str]:
    """Multi-head latent attention as DeepSeek-V2's reference code runs it: the query from
    its own latent (normed) or directly; the keys and values up-projected per head from a
    normed ``kv_lora_rank`` latent; the key's rotary part one head wide, shared by every
    head (copied to each: the cache holds whole keys); rotary embeddings on the rotary
    parts only."""
    heads, d, dv, rope = spec.num_heads, spec.head_dim, spec.value_dim, spec.qk_rope_head_dim
    nope, m = d - rope, w.matrices
    if spec.q_lora_rank:
        query = g.matmul(norm(g, g.matmul(xn, m["q_a"]), w.norms["q_a_norm"],
                              w.zero_latent["q_a_norm"]), m["q_b"])
    else:
        query = g.matmul(xn, m["q"])
    q_nope, q_rot = g.split(split_heads(g, query, heads, d), [nope, rope], axis=-1)
    q = g.concat([q_nope, rotate(g, q_rot, past)], axis=-1)
    latent, k_rot = g.split(g.matmul(xn, m["kv_a"]), [spec.kv_lora_rank, rope], axis=-1)
    latent = norm(g, latent, w.norms["kv_a_norm"], w.zero_latent["kv_a_norm"])
    k_nope, v = g.split(split_heads(g, g.matmul(latent, m["kv_b"]), heads, nope + dv),
                        [nope, dv], axis=-1)
    k_rot = rotate(g, split_heads(g, k_rot, 1, rope), past)
    k = g.concat([k_nope, g.concat([k_rot] * heads, axis=1)], axis=-1)
    return q, k, v
