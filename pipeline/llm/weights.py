"""One decoder block's weight tensors in the graph, and the shapes each architecture gives
them (plain or latent attention; a dense MLP or a mixture of experts)."""

from __future__ import annotations

import math

import numpy as np

from pipeline.llm.spec import LlmSpec
from pipeline.zoo.builder import GraphBuilder


class Weights:
    """One decoder block's weight tensors in a graph (and the LM head's column block)."""

    def __init__(self, g: GraphBuilder, spec: LlmSpec, matrices: dict[str, str],
                 gains: dict[str, str], zero_h: str) -> None:
        self.matrices = matrices
        self.q, self.k, self.v = (matrices.get(n, "") for n in ("q", "k", "v"))
        self.o = matrices["o"]
        self.up, self.down, self.gate = (matrices.get(n) for n in ("up", "down", "gate"))
        self.head = matrices.get("head")
        self.norms, self.zero_h = gains, zero_h
        self.bias: dict[str, str] = {}
        self.final_norm = gains.get("final_norm")
        self.zero_hd = g.const("head_norm_bias", np.zeros(spec.head_dim, np.float32)) \
            if spec.qk_norm else None
        # a latent's norm adds a zero bias of its own width (LayerNorm, as the others)
        self.zero_latent = {n: g.const(f"{n}_bias", np.zeros(g.shape[gains[n]][0], np.float32))
                            for n in ("q_a_norm", "kv_a_norm") if n in gains}

    @classmethod
    def seeded(cls, g: GraphBuilder, spec: LlmSpec, head_columns: int) -> Weights:
        """Seeded random weights (scaled by fan-in, so activations stay in range)."""
        h = spec.hidden_size
        shapes = {**attention_shapes(spec), "o": (spec.num_heads * spec.value_dim, h),
                  **mlp_shapes(spec), "head": (h, head_columns)}
        order = ["q_a", "q", "q_b", "kv_a", "kv_b", "k", "v", "o", "up", "gate", "down",
                 *(f"{e}_{n}" for e in ("router", "shared", "expert")
                   for n in ("", "up", "gate", "down")), "head"]
        matrices = {n: g.const(f"w_{'lm_head' if n == 'head' else n}",
                               scaled_normal(g.rng, shapes[n])) for n in order if n in shapes}
        names = ["attn_norm", "mlp_norm"] + (["post_attn_norm", "post_mlp_norm"]
                                             if spec.sandwich_norm else [])
        names += ["q_norm", "k_norm"] if spec.qk_norm else []
        widths = {"q_norm": spec.head_dim, "k_norm": spec.head_dim}
        if spec.latent:
            names += ["kv_a_norm"] + (["q_a_norm"] if spec.q_lora_rank else [])
            widths |= {"kv_a_norm": spec.kv_lora_rank, "q_a_norm": spec.q_lora_rank}
        gains = {n: g.const(n, np.ones(widths.get(n, h), np.float32)) for n in names}
        gains["final_norm"] = g.const("final_norm", np.ones(h, np.float32))
        made = cls(g, spec, matrices, gains, g.const("norm_bias", np.zeros(h, np.float32)))
        if spec.attention_bias:
            # small seeded values: an all-zero bias is an Add the graph libraries delete
            made.bias = {name: g.const(f"b_{name}", scaled_normal(
                g.rng, (1, heads, 1, spec.head_dim), scale=0.02))
                         for name, heads in (("q", spec.num_heads), ("k", spec.num_kv_heads),
                                             ("v", spec.num_kv_heads))}
        return made

    @classmethod
    def given(cls, g: GraphBuilder, spec: LlmSpec, arrays: dict[str, np.ndarray],
              zero_h: str) -> Weights:
        """Trained weights (``pipeline.llm.proxy``): matrices and the two norms' gains."""
        matrices = {n: g.const(f"w_{n}", arrays[n].astype(np.float32))
                    for n in ("q", "k", "v", "o", "gate", "up", "down") if n in arrays}
        gains = {n: g.const(n, arrays[n].astype(np.float32)) for n in ("attn_norm", "mlp_norm")}
        return cls(g, spec, matrices, gains, zero_h)


def attention_shapes(spec: LlmSpec) -> dict[str, tuple[int, int]]:
    """The q, k and v projections' weight shapes; a latent attention's down-projections to
    its latents (the key's shared rotary part beside the key/value latent) and up-projections
    to the heads."""
    h = spec.hidden_size
    if not spec.latent:
        return {"q": (h, spec.q_size), "k": (h, spec.kv_size), "v": (h, spec.kv_size)}
    rq, rkv, rope = spec.q_lora_rank, spec.kv_lora_rank, spec.qk_rope_head_dim
    query = {"q_a": (h, rq), "q_b": (rq, spec.q_size)} if rq else {"q": (h, spec.q_size)}
    nope = spec.head_dim - rope
    return {**query, "kv_a": (h, rkv + rope),
            "kv_b": (rkv, spec.num_heads * (nope + spec.value_dim))}


def mlp_shapes(spec: LlmSpec) -> dict[str, tuple[int, int]]:
    """The MLP's weight shapes: a dense one (up, gate where gated, down), or a mixture of
    experts' router, shared experts and one routed expert (the others are the same kernel
    on other weights), with the dense MLP too where some layers keep one."""
    h = spec.hidden_size

    def mlp(prefix: str, width: int) -> dict[str, tuple[int, int]]:
        names = {"up": (h, width), "down": (width, h)}
        if spec.gated_mlp:
            names["gate"] = (h, width)
        return {f"{prefix}{n}": shape for n, shape in names.items()}

    if not spec.num_experts:
        return mlp("", spec.intermediate_size)
    shapes = {"router_": (h, spec.num_experts), **mlp("expert_", spec.expert_size)}
    if spec.shared_expert_size:
        shapes |= mlp("shared_", spec.shared_expert_size)
    if spec.dense_layers:
        shapes |= mlp("", spec.intermediate_size)
    return shapes


def scaled_normal(rng: np.random.Generator, shape: tuple[int, ...],
                   scale: float | None = None) -> np.ndarray:
    """Normal in float32 times ``scale`` (default 1/sqrt(fan-in)), in place: a 4B model's
    block is 0.4 GB, so no float64 draw and no copies."""
    array = rng.standard_normal(shape, dtype=np.float32)
    array *= np.float32(scale if scale is not None else 1.0 / math.sqrt(shape[0]))
    return array
