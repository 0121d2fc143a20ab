"""A language model as one ONNX graph of its phases, the weights stored once.

Running a decoder-only model is three kinds of pass over the same weights: the prefill of
the prompt (S = prompt tokens, a causal mask, no cache), a decode step (S = 1 against a
cache of every earlier position), and the LM head that turns the last hidden state into
logits. The graph holds one decoder block per phase, named ``prefill/...``,
``decode_first/...`` (the first new token: context ``prompt + 1``) and ``decode_last/...``
(the last: ``prompt + new``), all reading the same weight initializers, and one column block
of the LM head (``lm_head/...``; ``spec.lm_head_chunks``). Every block has the same cost in
every layer, so one block stands for all ``num_layers``: the graph stays one block's weights
(a 4B model's 0.4 GB in float32, not 16 GB), and it goes through optimize, quantize and
compile like any network. ``pipeline.llm.phases`` turns the compiled phases into time to
first token and tokens per second.

The block's parts live in ``layers`` (norm, rotary embeddings, heads), ``weights``,
``attention`` (plain or latent) and ``experts`` (dense MLP or mixture of experts).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from pipeline.errors import UserError
from pipeline.llm.attention import latent_qkv, plain_qkv
from pipeline.llm.experts import experts, mlp
from pipeline.llm.layers import norm, reshape_to
from pipeline.llm.spec import LlmSpec, lm_head_chunks
from pipeline.llm.weights import Weights
from pipeline.optimizer import npu_passes
from pipeline.zoo.builder import GraphBuilder

PHASES = ("prefill", "decode_first", "decode_last", "lm_head")
MASKED = -30.0  # a causal mask's added score
OPSET = 21  # blocked DequantizeLinear (weight-only int4 with group scales) needs 21
# The prefill's causal mask is a float32 constant of (query heads per key head) x prompt x
# prompt values, and a graph is one protobuf message (2 GiB at most): half of that for it.
# Stored whole, not broadcast from one prompt x prompt block: the scores' MatMul adds it in
# its output stage (a fused residual add), which a view splitting the heads apart would
# break into a kernel of its own (measured: +0.3-2.5% on every prefill)
MASK_LIMIT_BYTES = 2**30


def block_body(g: GraphBuilder, w: Weights, spec: LlmSpec, x: str, seq: int, past: int,
               cache: tuple[str, str] | None = None) -> tuple[str, str, str]:
    """One decoder block over ``seq`` new positions of ``x`` after ``past`` cached ones
    (``cache``: the past keys and values). Returns its output and the present keys and
    values (the cache with this step's appended)."""
    d, kvh, dv = spec.head_dim, spec.num_kv_heads, spec.value_dim
    group = spec.num_heads // kvh
    xn = norm(g, x, w.norms["attn_norm"], w.zero_h)
    q, k, v = (latent_qkv if spec.latent else plain_qkv)(g, w, spec, xn, past)
    if cache:  # the cache: every earlier position's K and V, this step's appended
        k, v = g.concat([cache[0], k], axis=2), g.concat([cache[1], v], axis=2)
    context = past + seq
    # grouped-query attention: a key/value head's query heads stacked on the rows
    q = reshape_to(g, q, (1, kvh, group * seq, d))
    scores = g.scale(g.matmul(q, g.transpose(k, (0, 1, 3, 2))), 1.0 / math.sqrt(d))
    if seq > 1:  # causal: position i sees positions <= past + i
        rows = np.tile(np.arange(seq), group)[:, None] + past
        # -30: exp(-30) < 1e-13, as masked as -1e4 in float, and an int8 quantization of the
        # scores keeps its steps for the scores instead of spending them on the mask
        mask = np.where(np.arange(context)[None, :] > rows, MASKED, 0.0).astype(np.float32)
        scores = g.add(scores, g.const("causal_mask", mask))
    attended = g.matmul(g.softmax(scores, axis=-1), v)
    if seq > 1:  # [1, heads, S, d] -> [1, S, heads, d]; one position needs no transpose
        attended = g.transpose(reshape_to(g, attended, (1, spec.num_heads, seq, dv)),
                               (0, 2, 1, 3))
    out = g.matmul(g.reshape(attended, (1, seq, spec.num_heads * dv)), w.o)
    if spec.sandwich_norm:
        out = norm(g, out, w.norms["post_attn_norm"], w.zero_h)
    x = g.add(x, out)
    xn = norm(g, x, w.norms["mlp_norm"], w.zero_h)
    out = experts(g, w, spec, xn) if spec.num_experts else mlp(g, spec, xn, w.matrices)
    if spec.sandwich_norm:
        out = norm(g, out, w.norms["post_mlp_norm"], w.zero_h)
    return g.add(x, out), k, v


def _block(g: GraphBuilder, w: Weights, spec: LlmSpec, seq: int, past: int) -> None:
    """A phase's block as a graph: its hidden state and cache in, the same out."""
    phase = g.prefix.rstrip("/")
    x = g.input(f"{phase}.hidden", (1, seq, spec.hidden_size))
    shape = (1, spec.num_kv_heads, past)
    cache = (g.input(f"{phase}.past_key", (*shape, spec.head_dim)),
             g.input(f"{phase}.past_value", (*shape, spec.value_dim))) if past else None
    out, k, v = block_body(g, w, spec, x, seq, past, cache)
    for tensor in (k, v, out):
        g.output(tensor)


def phase_contexts(prompt: int, new: int) -> dict[str, tuple[int, int]]:
    """(new positions, cached positions) of each block phase."""
    return {"prefill": (prompt, 0), "decode_first": (1, prompt),
            "decode_last": (1, prompt + new - 1)}


def check_context(spec: LlmSpec, prompt_tokens: int, new_tokens: int, key: str) -> None:
    """Refuse, in one line naming ``key``, a context the model was not built for (its
    config's ``max_position_embeddings``) or a prompt whose prefill mask this graph cannot
    hold (``MASK_LIMIT_BYTES``), before anything is allocated: 40,000 tokens of Qwen3-0.6B
    would be a 12 GiB constant."""
    if spec.max_positions and prompt_tokens + new_tokens > spec.max_positions:
        raise UserError(f"{key}: {prompt_tokens} prompt + {new_tokens} new tokens is longer "
                        f"than the {spec.max_positions} positions {spec.name}'s config gives "
                        "it (max_position_embeddings)")
    group = spec.num_heads // spec.num_kv_heads
    need = group * prompt_tokens * prompt_tokens * 4
    if need > MASK_LIMIT_BYTES:
        most = math.isqrt(MASK_LIMIT_BYTES // (4 * group))
        raise UserError(f"{key}: {prompt_tokens} tokens: {spec.name}'s prefill holds its causal "
                        f"mask as a constant of {group} x {prompt_tokens} x {prompt_tokens} "
                        f"float32 values ({need / 2**30:.1f} GiB), over the "
                        f"{MASK_LIMIT_BYTES // 2**30} GiB a graph gives it; at most {most} "
                        "prompt tokens for this model")


def build(spec: LlmSpec, prompt_tokens: int, new_tokens: int, seed: int) -> onnx.ModelProto:
    g = GraphBuilder(spec.name.replace("/", "_"), seed, OPSET)
    columns, _ = lm_head_chunks(spec.vocab_size)
    w = Weights.seeded(g, spec, columns)
    for phase, (seq, past) in phase_contexts(prompt_tokens, new_tokens).items():
        g.prefix = f"{phase}/"
        _block(g, w, spec, seq, past)
    g.prefix = "lm_head/"
    last = g.input("lm_head.hidden", (1, 1, spec.hidden_size))
    g.output(g.matmul(norm(g, last, w.final_norm, w.zero_h), w.head))
    g.prefix = ""
    model = g.build()
    model.ir_version = 10  # what opset 21 needs (the builder caps zoo models at 9)
    # the activations as optimize would leave them (fused, or annotated where the opset has
    # no such op): optimize=llm then changes nothing and never rewrites the weights
    return _share_constants(npu_passes.fuse_gelu(npu_passes.fuse_silu(model)))


def _share_constants(model: onnx.ModelProto, limit: int = 1 << 16) -> onnx.ModelProto:
    """One initializer per distinct small constant (each phase builds its own shapes, scales
    and rotary tables; a query's and a key's tables are the same): what a cleanup pass's
    deduplication would leave; one no node reads any more (a fused GELU's) is dropped.
    Weights, larger than ``limit`` elements, are all distinct."""
    first: dict[tuple, str] = {}
    renamed: dict[str, str] = {}
    read = {name for node in model.graph.node for name in node.input}
    dropped = []
    for index, init in enumerate(model.graph.initializer):
        if init.name in read and math.prod(init.dims) <= limit:
            key = (init.data_type, tuple(init.dims), init.raw_data)
            if key in first:
                renamed[init.name] = first[key]
            else:
                first[key] = init.name
        if init.name not in read or init.name in renamed:
            dropped.append(index)
    for index in reversed(dropped):  # in place: the weights are never copied
        del model.graph.initializer[index]
    for node in model.graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
    return model
