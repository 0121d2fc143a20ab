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

Norms are ``LayerNormalization`` with a zero bias: RMSNorm (opset 23) has the same operands
and the same per-element work, minus one subtraction, and every tool this graph passes
through (onnxslim, onnxruntime's quantizer, the compiler's op rules) knows LayerNorm.
Rotary embeddings are built as exporters write them: ``x * cos + rotate_half(x) * sin``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from pipeline.errors import UserError
from pipeline.llm.spec import LlmSpec, lm_head_chunks
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
        shapes = {**_attention_shapes(spec), "o": (spec.num_heads * spec.value_dim, h),
                  **_mlp_shapes(spec), "head": (h, head_columns)}
        order = ["q_a", "q", "q_b", "kv_a", "kv_b", "k", "v", "o", "up", "gate", "down",
                 *(f"{e}_{n}" for e in ("router", "shared", "expert")
                   for n in ("", "up", "gate", "down")), "head"]
        matrices = {n: g.const(f"w_{'lm_head' if n == 'head' else n}",
                               _scaled_normal(g.rng, shapes[n])) for n in order if n in shapes}
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
            made.bias = {name: g.const(f"b_{name}", _scaled_normal(
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


def _attention_shapes(spec: LlmSpec) -> dict[str, tuple[int, int]]:
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


def _mlp_shapes(spec: LlmSpec) -> dict[str, tuple[int, int]]:
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


def _scaled_normal(rng: np.random.Generator, shape: tuple[int, ...],
                   scale: float | None = None) -> np.ndarray:
    """Normal in float32 times ``scale`` (default 1/sqrt(fan-in)), in place: a 4B model's
    block is 0.4 GB, so no float64 draw and no copies."""
    array = rng.standard_normal(shape, dtype=np.float32)
    array *= np.float32(scale if scale is not None else 1.0 / math.sqrt(shape[0]))
    return array


def _reshape(g: GraphBuilder, x: str, shape: tuple[int, ...]) -> str:
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


def _rope(g: GraphBuilder, x: str, start: int) -> str:
    """``x * cos + rotate_half(x) * sin`` at positions ``start ..`` (x: [1, heads, S, d])."""
    _, _, s, d = g.shape[x]
    cos_table, sin_table = rope_tables(d, start, s)
    cos, sin = g.const("rope_cos", cos_table), g.const("rope_sin", sin_table)
    first, second = g.split(x, [d // 2, d // 2], axis=-1)
    rotated = g.concat([g._node("Neg", [second], g.shape[second]), first], axis=-1)
    return g.add(g.mul(x, cos), g.mul(rotated, sin))


def _heads(g: GraphBuilder, x: str, heads: int, d: int) -> str:
    """[1, S, heads * d] -> [1, heads, S, d] (one position or one head: a Reshape alone,
    the form onnxslim would leave)."""
    s = g.shape[x][1]
    if s == 1 or heads == 1:
        return g.reshape(x, (1, heads, s, d))
    return g.transpose(g.reshape(x, (1, s, heads, d)), (0, 2, 1, 3))


def block_body(g: GraphBuilder, w: Weights, spec: LlmSpec, x: str, seq: int, past: int,
               cache: tuple[str, str] | None = None) -> tuple[str, str, str]:
    """One decoder block over ``seq`` new positions of ``x`` after ``past`` cached ones
    (``cache``: the past keys and values). Returns its output and the present keys and
    values (the cache with this step's appended)."""
    d, kvh, dv = spec.head_dim, spec.num_kv_heads, spec.value_dim
    group = spec.num_heads // kvh
    xn = norm(g, x, w.norms["attn_norm"], w.zero_h)
    q, k, v = (_latent_qkv if spec.latent else _qkv)(g, w, spec, xn, past)
    if cache:  # the cache: every earlier position's K and V, this step's appended
        k, v = g.concat([cache[0], k], axis=2), g.concat([cache[1], v], axis=2)
    context = past + seq
    # grouped-query attention: a key/value head's query heads stacked on the rows
    q = _reshape(g, q, (1, kvh, group * seq, d))
    scores = g.scale(g.matmul(q, g.transpose(k, (0, 1, 3, 2))), 1.0 / math.sqrt(d))
    if seq > 1:  # causal: position i sees positions <= past + i
        rows = np.tile(np.arange(seq), group)[:, None] + past
        # -30: exp(-30) < 1e-13, as masked as -1e4 in float, and an int8 quantization of the
        # scores keeps its steps for the scores instead of spending them on the mask
        mask = np.where(np.arange(context)[None, :] > rows, MASKED, 0.0).astype(np.float32)
        scores = g.add(scores, g.const("causal_mask", mask))
    attended = g.matmul(g.softmax(scores, axis=-1), v)
    if seq > 1:  # [1, heads, S, d] -> [1, S, heads, d]; one position needs no transpose
        attended = g.transpose(_reshape(g, attended, (1, spec.num_heads, seq, dv)),
                               (0, 2, 1, 3))
    out = g.matmul(g.reshape(attended, (1, seq, spec.num_heads * dv)), w.o)
    if spec.sandwich_norm:
        out = norm(g, out, w.norms["post_attn_norm"], w.zero_h)
    x = g.add(x, out)
    xn = norm(g, x, w.norms["mlp_norm"], w.zero_h)
    out = _experts(g, w, spec, xn) if spec.num_experts else _mlp(g, spec, xn, w.matrices)
    if spec.sandwich_norm:
        out = norm(g, out, w.norms["post_mlp_norm"], w.zero_h)
    return g.add(x, out), k, v


def _qkv(g: GraphBuilder, w: Weights, spec: LlmSpec, xn: str, past: int
         ) -> tuple[str, str, str]:
    """Queries, keys and values per head ([1, heads, S, d]), rotated and normed as the
    model does."""
    d = spec.head_dim

    def project(weight: str, heads: int, bias: str | None) -> str:
        # the bias is added per head, after the split: the same sum, and a MatMul whose
        # weight every phase shares (a MatMul + Add would be fused into a Gemm per phase)
        y = _heads(g, g.matmul(xn, weight), heads, d)
        return g.add(y, bias) if bias else y

    q = project(w.q, spec.num_heads, w.bias.get("q"))
    k = project(w.k, spec.num_kv_heads, w.bias.get("k"))
    v = project(w.v, spec.num_kv_heads, w.bias.get("v"))
    if spec.qk_norm:
        q, k = (norm(g, q, w.norms["q_norm"], w.zero_hd),
                norm(g, k, w.norms["k_norm"], w.zero_hd))
    return _rope(g, q, past), _rope(g, k, past), v


def _latent_qkv(g: GraphBuilder, w: Weights, spec: LlmSpec, xn: str, past: int
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
    q_nope, q_rot = g.split(_heads(g, query, heads, d), [nope, rope], axis=-1)
    q = g.concat([q_nope, _rope(g, q_rot, past)], axis=-1)
    latent, k_rot = g.split(g.matmul(xn, m["kv_a"]), [spec.kv_lora_rank, rope], axis=-1)
    latent = norm(g, latent, w.norms["kv_a_norm"], w.zero_latent["kv_a_norm"])
    k_nope, v = g.split(_heads(g, g.matmul(latent, m["kv_b"]), heads, nope + dv),
                        [nope, dv], axis=-1)
    k_rot = _rope(g, _heads(g, k_rot, 1, rope), past)
    k = g.concat([k_nope, g.concat([k_rot] * heads, axis=1)], axis=-1)
    return q, k, v


def _mlp(g: GraphBuilder, spec: LlmSpec, x: str, m: dict[str, str], prefix: str = "") -> str:
    """down(act(gate(x)) * up(x)), or down(act(up(x))) without a gate."""
    act = g.silu if spec.activation == "silu" else g.gelu_erf
    gate = m.get(f"{prefix}gate")
    if gate is not None:
        hidden = g.mul(act(g.matmul(x, gate)), g.matmul(x, m[f"{prefix}up"]))
    else:
        hidden = act(g.matmul(x, m[f"{prefix}up"]))
    return g.matmul(hidden, m[f"{prefix}down"])


def _experts(g: GraphBuilder, w: Weights, spec: LlmSpec, xn: str) -> str:
    """A mixture of experts as its parts, each under a name of its own so the phases can
    count it as often as a layer runs it (``pipeline.llm.phases``):

    - ``<phase>.moe/``: the router (a MatMul to the experts' logits, their softmax, the top
      gate that weighs the routed output) and the shared experts, once per MoE layer;
    - ``<phase>.expert/``: one routed expert over the rows it takes
      (``spec.rows_per_expert``: a prompt's tokens x k spread over the experts they touch;
      one row in a decode step), run once per expert a pass touches; the others are the
      same kernel on other weights;
    - ``<phase>.dense/``: the dense MLP of the layers that keep one (an output of its own).
    """
    phase, m = g.prefix.rstrip("/"), w.matrices
    seq = g.shape[xn][1]
    g.prefix = f"{phase}.moe/"
    logits = g.softmax(g.matmul(xn, m["router_"]), axis=-1)
    gate = g._node("ReduceMax", [logits, g.const("axes", np.array([-1], np.int64))],
                   (*g.shape[logits][:-1], 1), keepdims=1)
    shared = _mlp(g, spec, xn, m, "shared_") if spec.shared_expert_size else None
    g.prefix = f"{phase}.expert/"
    rows = spec.rows_per_expert(seq)
    taken = xn
    if seq > 1:  # the rows one expert takes (which ones does not change the cost)
        taken = g._node("Slice", [xn, *(g.const(n, np.array([v], np.int64)) for n, v in
                                         (("starts", 0), ("ends", rows), ("axes", 1)))],
                        (1, rows, spec.hidden_size))
    routed = _mlp(g, spec, taken, m, "expert_")
    if seq > 1:  # back in place among the prompt's rows
        pads = g.const("pads", np.array([0, 0, 0, 0, seq - rows, 0], np.int64))
        routed = g._node("Pad", [routed, pads], (1, seq, spec.hidden_size))
    g.prefix = f"{phase}.moe/"
    out = g.mul(routed, gate)
    if shared:
        out = g.add(out, shared)
    if spec.dense_layers:
        g.prefix = f"{phase}.dense/"
        g.output(_mlp(g, spec, xn, m))
    g.prefix = f"{phase}/"
    return out


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
