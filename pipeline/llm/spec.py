"""A decoder-only language model's shape, read from a Hugging Face style ``config.json``.

Only the numbers that change the graph or its bytes are read: widths, depths, heads, the
vocabulary, whether the LM head shares the embedding table, and the few architectural
switches that add nodes (attention biases, Qwen3's per-head q/k norms, Gemma2's extra
norms, a gated or plain MLP, a mixture of experts, DeepSeek-V2's and MiniCPM3's multi-head
latent attention, sliding windows).
Exporters disagree on names (ChatGLM3 writes ``num_layers``,
``multi_query_group_num``, ``ffn_hidden_size``, ``padded_vocab_size``, ``kv_channels``), so
each field lists the keys it accepts, first match wins. A missing or absurd value is one
line naming the file and the key; so is a key that announces a mechanism the graph does
not build (linear-attention, state-space or recurrent layers): npuflow would otherwise cost
a different model without a word.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import UserError

# field -> the config.json keys that give it, in order of preference
ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "num_layers", "n_layer"),
    "num_heads": ("num_attention_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads", "multi_query_group_num", "num_kv_heads"),
    "head_dim": ("head_dim", "kv_channels"),
    "intermediate_size": ("intermediate_size", "ffn_hidden_size", "n_inner"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "max_positions": ("max_position_embeddings", "n_positions", "seq_length",
                      "max_sequence_length"),
}
GELU_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")
# families whose MLP is up -> activation -> down (no gate); their width defaults to 4x
PLAIN_MLP = ("gpt2", "gpt_neox", "opt", "phi", "gptj", "gpt_bigcode", "falcon", "bloom",
             "mpt", "codegen", "starcoder2")
LIMIT = 1 << 20  # no dimension of a 2026 language model is a million wide
POSITIONS_LIMIT = 1 << 27  # contexts are longer: 10M-token models exist
# families whose q and k carry a norm of their own (Qwen3, Gemma3, OLMo2; others say so with
# ``qk_layernorm`` / ``use_qk_norm``) and whose blocks also norm their outputs (Gemma2/3)
QK_NORM = ("qwen3", "gemma3", "olmo2")
SANDWICH_NORM = ("gemma2", "gemma3")
# keys that announce a mechanism the graph does not build: a truthy value is refused
UNBUILT_KEYS = {
    "linear_attn_config": "linear-attention layers", "ssm_state_size": "state-space layers",
    "mamba_d_state": "state-space layers", "altup_num_inputs": "Gemma3n's AltUp layers",
}
# mixture of experts: the routed experts' count, how many a token takes, one expert's width
EXPERT_KEYS = {
    "num_experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "experts_per_token": ("num_experts_per_tok", "experts_per_token", "num_selected_experts",
                          "moe_topk"),
}
ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "attention")
# model types whose layers are recurrent, not attention
RECURRENT_TYPES = ("rwkv", "mamba", "recurrent_gemma", "xlstm", "jamba", "falcon_h1",
                   "nemotron_h", "zamba")


@dataclass(frozen=True)
class LlmSpec:
    """The graph-relevant shape of a decoder-only transformer."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    attention_bias: bool  # q/k/v projections carry a bias (Qwen2)
    qk_norm: bool  # a norm on each head's q and k (Qwen3)
    sandwich_norm: bool  # norms after attention and MLP too (Gemma2)
    gated_mlp: bool  # down(act(gate(x)) * up(x)); False: down(act(up(x)))
    activation: str  # silu | gelu
    max_positions: int = 0  # the longest context the model was built for (0: not given)
    # multi-head latent attention (0: none): keys and values come out of a ``kv_lora_rank``
    # latent, and ``qk_rope_head_dim`` of the ``head_dim`` query/key width is a rotary part
    # one key head shares; the query may come out of a ``q_lora_rank`` latent too
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0  # a value head's width where it differs from head_dim
    # sliding-window attention: ``local_layers`` of the layers attend over at most the last
    # ``sliding_window`` positions (Mistral, Gemma2's every other layer, Gemma3's five in six)
    sliding_window: int = 0
    local_layers: int = 0
    # mixture of experts (0: a dense MLP): ``num_experts`` routed experts of width
    # ``expert_size``, ``experts_per_token`` of them per token, shared experts of total width
    # ``shared_expert_size``; ``dense_layers`` layers keep a dense MLP (DeepSeek's first ones)
    num_experts: int = 0
    experts_per_token: int = 0
    expert_size: int = 0
    shared_expert_size: int = 0
    dense_layers: int = 0

    @property
    def latent(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def layer_params(self) -> int:
        """Weights of one decoder block: the attention projections (biases of q, k, v
        where the model has them; a latent attention's down- and up-projections and their
        norms), the MLP, and the norms' gains."""
        h, i = self.hidden_size, self.intermediate_size
        out = self.num_heads * self.value_dim * h
        if self.latent:
            rq, rkv, rope = self.q_lora_rank, self.kv_lora_rank, self.qk_rope_head_dim
            query = h * rq + rq + rq * self.q_size if rq else h * self.q_size
            nope = self.head_dim - rope
            attn = query + h * (rkv + rope) + rkv + \
                rkv * self.num_heads * (nope + self.value_dim) + out
        else:
            attn = h * self.q_size + 2 * h * self.kv_size + out
            if self.attention_bias:  # the graph adds q/k/v biases to plain attention only
                attn += self.q_size + 2 * self.kv_size
        norms = h * (4 if self.sandwich_norm else 2) + (2 * self.head_dim if self.qk_norm else 0)
        return attn + norms + (self.moe_params() if self.num_experts else self._mlp(i))

    def _mlp(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden_size * width

    def moe_params(self) -> int:
        """A mixture-of-experts MLP: the router, every routed expert, the shared ones."""
        return self.hidden_size * self.num_experts + \
            self.num_experts * self._mlp(self.expert_size) + self._mlp(self.shared_expert_size)

    def experts_touched(self, tokens: int) -> float:
        """Routed experts a pass over ``tokens`` tokens reads, each token choosing
        ``experts_per_token`` of ``num_experts`` uniformly (a balanced router, what the
        load-balancing loss trains for): ``E (1 - (1 - k/E)^tokens)``; k for one token."""
        e, k = self.num_experts, self.experts_per_token
        return e * (1 - (1 - k / e) ** tokens)

    def rows_per_expert(self, tokens: int) -> int:
        """The tokens each touched expert takes: ``tokens x k`` spread over those touched."""
        share = tokens * self.experts_per_token / self.experts_touched(tokens)
        return max(1, math.ceil(round(share, 6)))  # 256 / 7.999999 tokens is 32, not 33

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def params(self) -> int:
        """Parameters as Hugging Face counts them: the blocks, the final norm, the embedding
        table, and the LM head unless it is the embedding table itself."""
        head = 0 if self.tie_word_embeddings else self.embedding_params()
        dense = self.dense_layers * (self.layer_params() - self.moe_params() +
                                     self._mlp(self.intermediate_size))
        return (self.num_layers - self.dense_layers) * self.layer_params() + dense + \
            self.hidden_size + self.embedding_params() + head

    def kv_positions(self, context: int) -> int:
        """Positions the cache holds over all layers at ``context``: every position in a
        full-attention layer, at most the window in a local one (a sliding-window cache,
        as the reference implementations keep it)."""
        local = min(context, self.sliding_window) if self.sliding_window else context
        return (self.num_layers - self.local_layers) * context + self.local_layers * local

    def kv_bytes_per_token(self, element_bytes: int = 2) -> int:
        """K and V of one position, every layer (fp16 by default). A latent attention
        caches each head's key and value as its reference implementation does (Hugging
        Face's DeepSeek-V2 and MiniCPM3 code caches them after the up-projection), not the
        latent that optimised runtimes keep."""
        return self.num_layers * self.num_kv_heads * (self.head_dim + self.value_dim) * \
            element_bytes


def _pick(hf: dict[str, Any], field: str, where: str, default: Any = None) -> Any:
    for key in ALIASES[field]:
        if hf.get(key) is not None:
            return key, hf[key]
    if default is not None:
        return ALIASES[field][0], default
    raise UserError(f"{where}: no '{ALIASES[field][0]}' (nor {', '.join(ALIASES[field][1:])})")


def _positive(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= LIMIT:
        raise UserError(f"{where}: '{key}' must be a whole number in 1..{LIMIT}, got {value!r}")
    return value


def from_hf(hf: dict[str, Any], where: str, name: str | None = None) -> LlmSpec:
    """The spec of a Hugging Face config (``where`` names the file or key in messages)."""
    if not isinstance(hf, dict):
        raise UserError(f"{where}: expected a JSON object (a config.json), got "
                        f"{type(hf).__name__}")
    kind = str(hf.get("model_type", "")).lower()
    _refuse_unbuilt(hf, kind, where)
    plain = kind in PLAIN_MLP
    size = {f: _positive(where, *_pick(hf, f, where)) for f in
            ("hidden_size", "num_layers", "num_heads", "vocab_size")}
    size["intermediate_size"] = _positive(where, *_pick(
        hf, "intermediate_size", where, 4 * size["hidden_size"] if plain else None))
    kv_key, kv = _pick(hf, "num_kv_heads", where, size["num_heads"])
    kv = _positive(where, kv_key, kv)
    if size["num_heads"] % kv:
        raise UserError(f"{where}: '{kv_key}' ({kv}) must divide num_attention_heads "
                        f"({size['num_heads']}): each key/value head serves a whole group")
    hd_key, head_dim = _pick(hf, "head_dim", where, size["hidden_size"] // size["num_heads"])
    head_dim = _positive(where, hd_key, head_dim)
    latent = _latent(hf, where, size["hidden_size"] // size["num_heads"])
    if latent:  # one key and value head per query head, as the reference code caches them
        kv, head_dim = size["num_heads"], latent.pop("head_dim")
    act = str(hf.get("hidden_act") or hf.get("hidden_activation")
              or hf.get("activation_function") or ("gelu" if plain else "silu")).lower()
    if act not in ("silu", "swish", *GELU_ACTS):
        raise UserError(f"{where}: 'hidden_act' {act!r} is not one npuflow builds "
                        f"(silu, swish, {', '.join(GELU_ACTS)})")
    pos_key, positions = _pick(hf, "max_positions", where, 0)
    if positions and (isinstance(positions, bool) or not isinstance(positions, int)
                      or not 0 < positions <= POSITIONS_LIMIT):
        raise UserError(f"{where}: '{pos_key}' must be a whole number in "
                        f"1..{POSITIONS_LIMIT}, got {positions!r}")
    window, local = _sliding(hf, kind, size["num_layers"], where)
    experts = _experts(hf, where, size["num_layers"], size["intermediate_size"])
    tie = hf.get("tie_word_embeddings", True)
    if not isinstance(tie, bool):
        raise UserError(f"{where}: 'tie_word_embeddings' must be true or false, got {tie!r}")
    return LlmSpec(
        name=name or str(hf.get("_name_or_path") or kind or "llm"),
        hidden_size=size["hidden_size"], num_layers=size["num_layers"],
        num_heads=size["num_heads"], num_kv_heads=kv, head_dim=head_dim,
        intermediate_size=size["intermediate_size"], vocab_size=size["vocab_size"],
        tie_word_embeddings=tie,
        attention_bias=bool(hf.get("attention_bias", kind.startswith("qwen2"))
                            or hf.get("add_qkv_bias", False)),
        qk_norm=kind.startswith(QK_NORM) or bool(hf.get("qk_layernorm") or hf.get("use_qk_norm")),
        sandwich_norm=kind.startswith(SANDWICH_NORM), gated_mlp=not plain,
        activation="gelu" if act in GELU_ACTS else "silu", max_positions=positions,
        sliding_window=window, local_layers=local, **latent, **experts)


def _experts(hf: dict[str, Any], where: str, layers: int, width: int) -> dict[str, int]:
    """A mixture of experts' shape as the families write it (empty: a dense MLP). One
    expert's width is ``moe_intermediate_size`` where given (Qwen-MoE, DeepSeek), else
    ``intermediate_size`` (Mixtral, OLMoE, Granite, gpt-oss); shared experts are Qwen2-MoE's
    ``shared_expert_intermediate_size`` or DeepSeek's ``n_shared_experts`` experts; dense
    layers are DeepSeek's ``first_k_dense_replace`` first ones or Qwen-MoE's
    ``mlp_only_layers``."""
    found = {f: next(((k, hf[k]) for k in keys if hf.get(k)), None)
             for f, keys in EXPERT_KEYS.items()}
    if found["num_experts"] is None:
        return {}
    experts = _positive(where, *found["num_experts"])
    if found["experts_per_token"] is None:
        raise UserError(f"{where}: '{found['num_experts'][0]}' (experts) needs "
                        f"'{EXPERT_KEYS['experts_per_token'][0]}'")
    per_token = _positive(where, *found["experts_per_token"])
    if per_token > experts:
        raise UserError(f"{where}: '{found['experts_per_token'][0]}' ({per_token}) is more "
                        f"than the {experts} experts")
    size = _positive(where, "moe_intermediate_size", hf["moe_intermediate_size"]) \
        if hf.get("moe_intermediate_size") is not None else width  # width: already checked
    shared = _count(hf, "shared_expert_intermediate_size", where) or \
        size * _count(hf, "n_shared_experts", where)
    dense = _count(hf, "first_k_dense_replace", where) + len(hf.get("mlp_only_layers") or [])
    if dense >= layers:
        raise UserError(f"{where}: {dense} dense layers leave no layer its experts")
    return {"num_experts": experts, "experts_per_token": per_token, "expert_size": size,
            "shared_expert_size": shared, "dense_layers": dense}


def _count(hf: dict[str, Any], key: str, where: str) -> int:
    """A whole number >= 0 (absent or null: 0)."""
    value = hf.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= LIMIT:
        raise UserError(f"{where}: '{key}' must be a whole number in 0..{LIMIT}, got {value!r}")
    return value


def _sliding(hf: dict[str, Any], kind: str, layers: int, where: str) -> tuple[int, int]:
    """(window, layers using it) as the families' reference code decides: ``layer_types``
    where given; Gemma2 every other layer (the even ones); a ``sliding_window_pattern`` of
    p (Gemma3: 6) every layer but each p-th; Qwen2's ``use_sliding_window`` from
    ``max_window_layers`` on; otherwise (Mistral, Phi-3) every layer. A window of null, or
    ``use_sliding_window: false``, is none."""
    window = hf.get("sliding_window")
    if not window or hf.get("use_sliding_window") is False:
        return 0, 0
    window = _positive(where, "sliding_window", window)
    types = hf.get("layer_types")
    if types:
        if not isinstance(types, list) or len(types) != layers:
            raise UserError(f"{where}: 'layer_types' must list one kind per layer ({layers})")
        return window, sum(t == "sliding_attention" for t in types)
    if kind.startswith("gemma2"):
        return window, (layers + 1) // 2
    pattern = hf.get("sliding_window_pattern", 6 if kind.startswith("gemma3") else None)
    if pattern is not None:
        return window, layers - layers // _positive(where, "sliding_window_pattern", pattern)
    if hf.get("use_sliding_window") and hf.get("max_window_layers") is not None:
        first = hf["max_window_layers"]
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise UserError(f"{where}: 'max_window_layers' must be a whole number, got "
                            f"{first!r}")
        return window, max(layers - first, 0)
    return window, layers


def _latent(hf: dict[str, Any], where: str, hidden_per_head: int) -> dict[str, int]:
    """A multi-head latent attention's widths (empty: the model has none): DeepSeek-V2's
    ``kv_lora_rank``, ``q_lora_rank`` (absent or null: q projected directly),
    ``qk_nope_head_dim`` + ``qk_rope_head_dim`` (a query/key head) and ``v_head_dim``
    (absent: hidden_size / heads, as MiniCPM3's modeling code takes it)."""
    if not hf.get("kv_lora_rank"):
        return {}
    widths = {}
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        value = hf.get(key, hidden_per_head if key == "v_head_dim" else None)
        if value is None:
            raise UserError(f"{where}: 'kv_lora_rank' (latent attention) needs '{key}'")
        widths[key] = _positive(where, key, value)
    rank = hf.get("q_lora_rank")
    return {"kv_lora_rank": widths["kv_lora_rank"],
            "q_lora_rank": _positive(where, "q_lora_rank", rank) if rank else 0,
            "qk_rope_head_dim": widths["qk_rope_head_dim"], "v_head_dim": widths["v_head_dim"],
            "head_dim": widths["qk_nope_head_dim"] + widths["qk_rope_head_dim"]}


def _refuse_unbuilt(hf: dict[str, Any], kind: str, where: str) -> None:
    """One line naming the key of a mechanism the graph does not build."""
    for key, mechanism in UNBUILT_KEYS.items():
        if hf.get(key):
            raise UserError(f"{where}: '{key}' means {mechanism}, which npuflow's "
                            "language-model graph does not build (it would cost a dense "
                            "model instead)")
    other = sorted({str(t) for t in hf.get("layer_types") or []} - set(ATTENTION_LAYER_TYPES))
    if other:
        raise UserError(f"{where}: 'layer_types' has {', '.join(other)} layers; npuflow's "
                        "language-model graph builds attention layers only")
    if kind.startswith(RECURRENT_TYPES):
        raise UserError(f"{where}: 'model_type' {kind!r} has recurrent layers; npuflow's "
                        "language-model graph builds attention layers only")


def load(path: str | Path) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise UserError(f"model.config: {file} does not exist")
    try:
        return json.loads(file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"model.config: {file} is not JSON ({exc})") from exc


def lm_head_chunks(vocab: int, width: int = 8192) -> tuple[int, int]:
    """(columns per chunk, chunks): the LM head as ``chunks`` equal column blocks of at
    most ``width``. One block is built and costed; the others are the same kernel on other
    weights, so the head costs ``chunks`` times one block (a tiled MatMul's cost is the sum
    of its column tiles'). The blocks cover ``chunks * columns >= vocab``, at most
    ``chunks - 1`` columns over."""
    chunks = math.ceil(vocab / width)
    return math.ceil(vocab / chunks), chunks
