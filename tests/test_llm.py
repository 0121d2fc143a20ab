"""Language models: a decoder from its config.json through the five stages, prefill and
decode timed from the compiled phases, weight-only int4 stored as int4, memory as stored."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from omegaconf import OmegaConf

from pipeline import api, html_report
from pipeline.errors import UserError
from pipeline.llm import graph, layers, phases, spec
from pipeline.optimizer import library_passes, registry
from pipeline.quantization import schemes

CONF = Path(__file__).resolve().parent.parent / "conf" / "model"
TINY = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 1000, "tie_word_embeddings": False}
RUN = ("hardware=rk3588", "data.calibration_size=2", "data.eval_size=2",
       "quant.analysis.layers=false", "model.prompt_tokens=16", "model.new_tokens=4",
       "simulate.llm.prompt_tokens=16", "simulate.llm.new_tokens=4")


@pytest.mark.parametrize("preset", sorted(p.stem for p in CONF.glob("*.yaml")
                                          if "\n  - llm\n" in p.read_text()))
def test_every_preset_has_its_published_parameter_count(preset):
    cfg = OmegaConf.load(CONF / f"{preset}.yaml")
    hf = OmegaConf.to_container(cfg.hf)
    assert spec.from_hf(hf, preset).params() == cfg.reference.params


def test_exporters_own_key_names_give_the_same_spec():
    llama = spec.from_hf({**TINY, "head_dim": 16}, "a")
    glm = spec.from_hf({"model_type": "llama", "hidden_size": 64, "num_layers": 3,
                        "num_attention_heads": 4, "multi_query_group_num": 2,
                        "kv_channels": 16, "ffn_hidden_size": 128, "padded_vocab_size": 1000,
                        "tie_word_embeddings": False}, "b")
    assert llama.params() == glm.params()
    assert (glm.num_kv_heads, glm.head_dim) == (2, 16)


def test_a_plain_mlp_family_is_read_with_its_own_defaults():
    """GPT-2's config.json: its own key names, no gate, the MLP 4x wide when n_inner is
    null, GELU from activation_function; the parameters are HF's less the learned
    positions and biases npuflow does not build (124,439,808 - 888,576)."""
    gpt2 = spec.from_hf({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                         "n_inner": None, "vocab_size": 50257,
                         "activation_function": "gelu_new"}, "gpt2")
    assert (gpt2.intermediate_size, gpt2.gated_mlp, gpt2.activation) == (3072, False, "gelu")
    assert gpt2.params() == 123551232


@pytest.mark.parametrize("hf, key", [
    ({k: v for k, v in TINY.items() if k != "hidden_size"}, "hidden_size"),
    ({**TINY, "num_key_value_heads": 3}, "num_key_value_heads"),
    ({**TINY, "intermediate_size": -5}, "intermediate_size"),
    ({**TINY, "num_hidden_layers": 2.5}, "num_hidden_layers"),
    ({**TINY, "hidden_act": "relu2"}, "hidden_act"),
    ({**TINY, "tie_word_embeddings": "yes"}, "tie_word_embeddings"),
])
def test_a_bad_config_is_one_line_naming_the_key(hf, key):
    with pytest.raises(UserError) as err:
        spec.from_hf(hf, "config.json")
    assert key in str(err.value) and "config.json" in str(err.value)
    assert "\n" not in str(err.value)


LATENT = {**TINY, "model_type": "minicpm3", "num_key_value_heads": 4, "q_lora_rank": 32,
          "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 12}


MOE = {**TINY, "model_type": "qwen2_moe", "moe_intermediate_size": 32,
       "shared_expert_intermediate_size": 48, "num_experts": 8, "num_experts_per_tok": 2,
       "mlp_only_layers": [0]}


def test_a_mixture_of_experts_is_read_as_each_family_writes_it():
    """Mixtral (experts as wide as intermediate_size, no shared one) and Qwen3-MoE
    (moe_intermediate_size) to their published parameter counts; DeepSeek's shared experts
    and dense first layers; Qwen2-MoE's shared width and dense layers."""
    mixtral = spec.from_hf({"model_type": "mixtral", "hidden_size": 4096,
                            "intermediate_size": 14336, "num_hidden_layers": 32,
                            "num_attention_heads": 32, "num_key_value_heads": 8,
                            "vocab_size": 32000, "num_local_experts": 8,
                            "num_experts_per_tok": 2, "tie_word_embeddings": False}, "m")
    assert mixtral.params() == 46_702_792_704  # Mixtral-8x7B's 46.7B
    qwen3 = spec.from_hf({"model_type": "qwen3_moe", "hidden_size": 2048,
                          "intermediate_size": 6144, "moe_intermediate_size": 768,
                          "num_hidden_layers": 48, "num_attention_heads": 32,
                          "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                          "num_experts": 128, "num_experts_per_tok": 8,
                          "tie_word_embeddings": False}, "q")
    assert qwen3.params() == 30_532_122_624  # Qwen3-30B-A3B's 30.5B
    deepseek = spec.from_hf({**TINY, "n_routed_experts": 16, "num_experts_per_tok": 4,
                             "moe_intermediate_size": 24, "n_shared_experts": 2,
                             "first_k_dense_replace": 1}, "d")
    assert (deepseek.expert_size, deepseek.shared_expert_size, deepseek.dense_layers) == \
        (24, 48, 1)
    moe = spec.from_hf(MOE, "t")
    assert (moe.num_experts, moe.experts_per_token, moe.expert_size, moe.shared_expert_size,
            moe.dense_layers) == (8, 2, 32, 48, 1)


def test_a_token_reads_k_experts_and_a_prompt_nearly_all():
    """A balanced router: one token touches k experts; a prompt's tokens touch
    E (1 - (1 - k/E)^tokens) of them, each taking tokens x k / touched rows."""
    s = spec.from_hf({**MOE, "num_experts": 8, "num_experts_per_tok": 2}, "t")
    assert s.experts_touched(1) == pytest.approx(2)
    assert s.experts_touched(128) == pytest.approx(8)
    assert s.rows_per_expert(1) == 1 and s.rows_per_expert(128) == 32
    assert 2 < s.experts_touched(4) < 8


@pytest.mark.parametrize("hf, key", [
    ({**TINY, "num_local_experts": 8}, "num_local_experts"),            # no k
    ({**TINY, "num_experts": 4, "num_experts_per_tok": 6}, "num_experts_per_tok"),
    ({**MOE, "first_k_dense_replace": 2}, "dense"),                       # 3 of 3 dense
    ({**TINY, "layer_types": ["linear_attention", "full_attention"]}, "layer_types"),
    ({**TINY, "model_type": "rwkv7"}, "model_type"),
    ({**LATENT, "qk_rope_head_dim": None}, "qk_rope_head_dim"),
])
def test_a_mechanism_the_graph_does_not_build_is_refused_naming_its_key(hf, key):
    """A config announcing experts, linear-attention or recurrent layers would otherwise be
    costed as a dense attention model; a latent attention missing a width cannot be built."""
    with pytest.raises(UserError) as err:
        spec.from_hf(hf, "config.json")
    assert key in str(err.value) and "\n" not in str(err.value)


def test_sliding_and_full_attention_layers_and_family_norms_are_read():
    """Gemma3 names its layers' attention kinds (both built) and norms q and k per head
    and every block's outputs; OLMo2 norms q and k; ``qk_layernorm`` says so for others."""
    gemma3 = spec.from_hf({**TINY, "model_type": "gemma3_text", "layer_types": [
        "sliding_attention", "full_attention"]}, "g")
    assert gemma3.qk_norm and gemma3.sandwich_norm
    assert spec.from_hf({**TINY, "model_type": "olmo2"}, "o").qk_norm
    assert spec.from_hf({**TINY, "qk_layernorm": True}, "p").qk_norm
    assert not spec.from_hf(TINY, "l").qk_norm


@pytest.mark.parametrize("extra, local", [
    ({"model_type": "mistral", "sliding_window": 4}, 3),               # every layer
    ({"model_type": "gemma2", "sliding_window": 4}, 2),                # layers 0 and 2
    ({"model_type": "gemma3_text", "sliding_window": 4,
      "sliding_window_pattern": 2}, 2),                                # all but each 2nd
    ({"model_type": "qwen2", "sliding_window": 4, "use_sliding_window": False}, 0),
    ({"model_type": "qwen2", "sliding_window": 4, "use_sliding_window": True,
      "max_window_layers": 1}, 2),                                     # from layer 1 on
    ({"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention",
                                           "sliding_attention"]}, 2),
    ({"sliding_window": None}, 0),
])
def test_the_layers_that_attend_over_a_window_are_the_families_own(extra, local):
    s = spec.from_hf({**TINY, **extra}, "t")
    assert s.local_layers == local
    assert s.kv_positions(10) == (3 - local) * 10 + local * (4 if local else 10)


def test_a_mixture_of_experts_costs_the_experts_a_pass_touches(tmp_path):
    """Through the five stages: a decode step's MLP is each MoE layer's router and shared
    experts plus k routed experts (one row each), the prefill's the experts its prompt
    touches (more rows each), the dense layer's its own MLP; the memory holds every
    expert: the one built, times the experts, per MoE layer."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MOE))
    result = api.run("model=llm", f"model.config={config}", "quant=w8a8", *RUN,
                     f"run.cache_dir={tmp_path / 'cache'}", run_dir=tmp_path / "run")
    b = json.loads((result.run_dir / "simulate" / "llm.json").read_text())
    plan = json.loads((result.run_dir / "compile" / "plan.json").read_text())

    def part(name: str) -> list[dict]:
        return [k for k in plan["kernels"] if k["name"].startswith(f"{name}/")]

    experts = b["experts"]
    assert experts["touched"]["decode_first"] == pytest.approx(2)
    assert 2 < experts["touched"]["prefill"] <= 8
    assert experts["rows_per_expert"] == {"prefill": 5, "decode_first": 1, "decode_last": 1}
    rows = {k["gemm"]["m"] for k in part("prefill.expert") if k["gemm"]}
    assert rows == {5}  # the routed expert's MatMuls take its rows, not the prompt's 16
    assert {k["gemm"]["m"] for k in part("decode_first.expert") if k["gemm"]} == {1}
    steps = b["decode_step_ms"]
    assert steps[0] == pytest.approx(3 * b["block_ms"]["decode_first"] +
                                     experts["mlp_ms"]["decode_first"] + b["lm_head_ms"] +
                                     b["sampling_ms"])
    assert experts["mlp_ms"]["prefill"] > experts["mlp_ms"]["decode_first"] > 0
    held = {n: sum(k["weight_bytes"] for k in part(f"decode_first{n}"))
            for n in ("", ".moe", ".expert", ".dense")}
    assert b["memory_bytes"]["weights.layers"] == 3 * held[""] + held[".dense"] + \
        2 * (held[".moe"] + 8 * held[".expert"])
    assert held[".expert"] == 3 * 64 * 32  # the routed expert's three int8 matrices
    trace = json.loads((result.run_dir / "simulate" / "trace.json").read_text())
    names = {e["args"]["name"].split(": ")[-1] for e in trace["traceEvents"]
             if e.get("name") == "process_name"}
    assert {"llm prefill one routed expert", "llm decode_first router and shared experts",
            "llm prefill dense MLP"} <= names  # each part its own process in the trace


def test_the_console_answer_adds_up_to_the_metrics(runs):
    """The table a language-model run prints: each figure is the metric, and what it says
    it is made of adds up to it (the prefill block x layers + head + sampling; weights +
    cache + activations)."""
    result = runs["w8a8"]
    m = result.metrics
    breakdown = json.loads((result.run_dir / "simulate" / "llm.json").read_text())
    rows = {r[0]: r for r in phases.summary_rows({"metrics": m, "breakdown": breakdown})}
    ttft = rows["time to first token"]
    assert ttft[1] == f"{m['ttft_ms']:,.1f} ms"
    layers, block, head, sampling = _numbers(ttft[2], 0, 1, 3, 4)
    assert layers * block + head + sampling == pytest.approx(m["ttft_ms"], abs=0.02)
    memory = _numbers(rows["memory"][2], 0, 1, 4)
    assert sum(memory) == pytest.approx(m["memory_mb"], abs=0.2)
    assert rows["decode"][1] == f"{m['decode_tokens_per_s']:,.2f} tokens/s"


def _numbers(text: str, *which: int) -> list[float]:
    found = [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", text)]
    return [found[i] for i in which]


def test_a_sliding_window_bounds_the_cache_and_the_decode_attention(runs):
    """A window shorter than the context: its layers' cache holds the window, and their
    decode block is the block at the window's context, so a decode step costs what the
    full-attention layers' attention adds and no more; no window, the figures as before."""
    from hardware.profile import profile_from_config
    from pipeline.compiler.plan import Plan

    result = runs["w8a8"]
    plan = Plan.from_json(json.loads((result.run_dir / "compile" / "plan.json").read_text()))
    profile = profile_from_config(result.config.hardware)
    full = spec.from_hf(TINY, "tiny")
    windowed = spec.from_hf({**TINY, "model_type": "gemma2", "sliding_window": 8}, "tiny")
    args = (plan, profile)
    rest = (16, 4, 1, phases.Precision(8, -1), 64)
    plain, _ = phases.estimate(*args, full, *rest)
    sliding, _ = phases.estimate(*args, windowed, *rest)
    per_layer = full.kv_bytes_per_token() // 3
    assert plain["breakdown"]["memory_bytes"]["kv_cache"] == 3 * 64 * per_layer
    assert sliding["breakdown"]["memory_bytes"]["kv_cache"] == (64 + 2 * 8) * per_layer
    steps, windowed_steps = (r["breakdown"]["decode_step_ms"] for r in (plain, sliding))
    growth = steps[-1] - steps[0]
    assert growth > 0 and windowed_steps[-1] - windowed_steps[0] == pytest.approx(growth / 3)
    assert windowed_steps[0] < steps[0]  # the window (8) is shorter than the prompt (16)
    assert sliding["metrics"]["ttft_ms"] == plain["metrics"]["ttft_ms"]


def _ln(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-6) * gain


def _rotate(x: np.ndarray, start: int) -> np.ndarray:
    cos, sin = layers.rope_tables(x.shape[-1], start, x.shape[-2])
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin


def test_latent_attention_computes_deepseek_v2s_attention():
    """The prefill block of a latent-attention model against DeepSeek-V2's attention
    written out in numpy from the graph's own weights: the query through its normed latent,
    keys and values up-projected from the normed kv latent, the one rotary key head shared
    by every head, rotary embeddings on the rotary parts only, causal softmax, o_proj, then
    the gated MLP. The present keys and values are the ones the cache holds."""
    s = spec.from_hf(LATENT, "latent")
    model = graph.build(s, 6, 2, seed=0)
    w = {i.name.rsplit("_", 1)[0]: onnx.numpy_helper.to_array(i)
         for i in model.graph.initializer if not i.name.startswith(("prefill/", "decode"))}
    session = ort.InferenceSession(model.SerializeToString())
    x = np.random.default_rng(1).standard_normal((1, 6, 64)).astype(np.float32)
    feeds = {i.name: np.zeros(i.shape, np.float32) for i in session.get_inputs()}
    feeds["prefill.hidden"] = x
    names = [o.name for o in session.get_outputs()]
    key, value, out = (r for n, r in zip(names, session.run(None, feeds), strict=True)
                       if n.startswith("prefill/"))
    heads, nope, rope, dv = 4, 16, 8, 12
    xn = _ln(x[0], w["attn_norm"])
    q = (_ln(xn @ w["w_q_a"], w["q_a_norm"]) @ w["w_q_b"]).reshape(6, heads, 24)
    q = q.transpose(1, 0, 2)
    q = np.concatenate([q[..., :nope], _rotate(q[..., nope:], 0)], -1)
    latent = xn @ w["w_kv_a"]
    kv = (_ln(latent[:, :16], w["kv_a_norm"]) @ w["w_kv_b"]).reshape(6, heads, nope + dv)
    kv = kv.transpose(1, 0, 2)
    shared = np.broadcast_to(_rotate(latent[None, :, 16:], 0), (heads, 6, rope))
    k, v = np.concatenate([kv[..., :nope], shared], -1), kv[..., nope:]
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(24) + np.triu(np.full((6, 6), -30.0), 1)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    attended = (p / p.sum(-1, keepdims=True)) @ v
    h = x[0] + attended.transpose(1, 0, 2).reshape(6, heads * dv) @ w["w_o"]
    hn = _ln(h, w.get("mlp_norm", w["attn_norm"]))  # equal gains are stored once
    gate = hn @ w["w_gate"]
    expected = h + (gate / (1 + np.exp(-gate)) * (hn @ w["w_up"])) @ w["w_down"]
    assert np.allclose(key[0], k, atol=1e-4) and np.allclose(value[0], v, atol=1e-4)
    assert np.allclose(out[0], expected, atol=1e-4)


def test_latent_attention_weights_and_cache_are_what_the_model_holds():
    """One block's weights in the graph are ``layer_params`` (its down- and up-projections,
    its latents' norms), and the cache per position is every head's whole key (nope + rope)
    and value: what the graph's present keys and values are wide."""
    s = spec.from_hf(LATENT, "latent")
    model = graph.build(s, 6, 2, seed=0)
    matrices = sum(int(np.prod(i.dims)) for i in model.graph.initializer
                   if i.name.startswith("w_") and not i.name.startswith("w_lm_head"))
    gains = 2 * 64 + 32 + 16  # two block norms, the q latent's and the kv latent's
    assert matrices + gains == s.layer_params()
    key, value, _ = (o for o in model.graph.output if o.name.startswith("decode_last/"))
    widths = [o.type.tensor_type.shape.dim[-1].dim_value for o in (key, value)]
    assert widths == [24, 12]
    assert s.kv_bytes_per_token() == 3 * 4 * (24 + 12) * 2


def test_the_phases_graph_runs_and_its_prefill_is_causal():
    s = spec.from_hf(TINY, "tiny")
    model = graph.build(s, 8, 4, seed=0)
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32)
             for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    out = dict(zip(names, session.run(None, feeds), strict=True))
    caches = {n: v.shape for n, v in out.items() if v.ndim == 4}
    # decode caches grow by the step: 8 prompt positions + 1, and + 4 at the last
    assert sorted({shape[2] for shape in caches.values()}) == [8, 9, 12]
    prefill_out = next(n for n in names if n.startswith("prefill/") and out[n].ndim == 3)
    later = dict(feeds)
    later["prefill.hidden"] = feeds["prefill.hidden"].copy()
    later["prefill.hidden"][0, -1] += 5.0  # only the last position changes
    again = dict(zip(names, session.run(None, later), strict=True))
    assert np.allclose(out[prefill_out][0, :-1], again[prefill_out][0, :-1], atol=1e-5)
    assert not np.allclose(out[prefill_out][0, -1], again[prefill_out][0, -1])


@pytest.mark.parametrize("hf", [
    TINY,
    {**TINY, "model_type": "qwen2"},                       # q/k/v biases
    {**TINY, "model_type": "qwen3", "head_dim": 32},       # q/k norms
    {**TINY, "model_type": "gemma2", "hidden_activation": "gelu_pytorch_tanh"},  # sandwich
    {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 500},
    LATENT,                                                # latent attention
    MOE,                                                   # experts, a dense layer
], ids=["llama", "qwen2", "qwen3", "gemma2", "gpt2", "latent", "moe"])
def test_the_graph_is_built_as_the_cleanup_passes_leave_it(hf):
    """optimize=llm (model=llm's choice) skips onnxslim and onnxruntime's basic level: on
    the builder's graph they would fold, fuse or delete nothing (onnxruntime moves one
    transpose across the rotary product, the same count; on a latent attention it pushes
    the kv transpose through the split into its two parts, one more), and npuflow's own
    passes return it untouched, so optimize never rewrites a language model's weights."""
    model = graph.build(spec.from_hf(hf, "t"), 8, 4, seed=0)
    ops = Counter(n.op_type for n in model.graph.node)
    weights = {i.name for i in model.graph.initializer}
    for library in (library_passes.onnxslim_pass, library_passes.ort_basic_pass):
        cleaned = Counter(n.op_type for n in library(model).graph.node)
        if library is library_passes.onnxslim_pass:
            assert cleaned == ops
        assert not ops - cleaned, library.__name__  # no node fused or deleted
        assert weights <= {i.name for i in library(model).graph.initializer}, library.__name__
    passes = OmegaConf.load(CONF.parent / "optimize" / "llm.yaml").passes
    assert passes and not {"onnxslim", "ort_basic"} & set(passes)
    for name in passes:
        assert registry.resolve(name, 0)[1](model) is model, name


@pytest.mark.parametrize("group", [0, 16])
def test_weight_only_int4_stores_each_shared_weight_once(group):
    s = spec.from_hf(TINY, "tiny")
    model = graph.build(s, 8, 4, seed=0)
    q = schemes.weight_only(model, OmegaConf.create(
        {"group_size": group, "weight_bits": 4, "weight_symmetric": True}))
    onnx.checker.check_model(q)
    packed = {i.name: i for i in q.graph.initializer if i.data_type == onnx.TensorProto.INT4}
    # 7 matrices of the block (shared by the three phases) and the head's column block
    assert len(packed) == 8
    assert not [i for i in q.graph.initializer
                if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) == 2 and
                min(i.dims) >= 64]  # no float copy of a weight is left behind
    down = next(i for name, i in packed.items() if name.startswith("w_down"))
    scales = next(i for i in q.graph.initializer if i.name.startswith("w_down") and
                  i.name.endswith("scales"))
    rows = 1 if group == 0 else down.dims[0] // group  # one scale per column, or per group
    assert list(scales.dims) == [rows, down.dims[1]]
    ort.InferenceSession(q.SerializeToString())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same tiny model from its config.json at three precisions (one cache: the proxy
    decoder is trained once)."""
    root = tmp_path_factory.mktemp("llm")
    config = root / "config.json"
    config.write_text(json.dumps(TINY))
    cache = f"run.cache_dir={root / 'cache'}"
    return {q: api.run("model=llm", f"model.config={config}", f"quant={q}", *RUN, cache,
                       run_dir=root / q)
            for q in ("w8a8", "w4a16", "fp16")}


def test_a_config_json_runs_the_five_stages_to_llm_metrics(runs):
    result = runs["w8a8"]
    m = result.metrics
    breakdown = json.loads((result.run_dir / "simulate" / "llm.json").read_text())
    assert m["ttft_ms"] == pytest.approx(sum(breakdown["prefill_ms"].values()))
    assert m["decode_tokens_per_s"] == pytest.approx(
        4 / (sum(breakdown["decode_step_ms"]) / 1e3))
    assert m["prefill_tokens_per_s"] == pytest.approx(16 / (m["ttft_ms"] / 1e3))
    assert m.latency_ms == pytest.approx(m["decode_ms_per_token"])
    steps = breakdown["decode_step_ms"]
    assert steps == sorted(steps)  # each step attends over one more position
    trace = json.loads((result.run_dir / "simulate" / "trace.json").read_text())
    names = {e["args"]["name"].split(": ")[-1] for e in trace["traceEvents"]
             if e.get("name") == "process_name"}
    assert {"llm prefill block", "llm first decode block", "llm lm_head chunk"} <= names


@pytest.mark.parametrize("quant", ["w8a8", "w4a16", "fp16"])
def test_a_run_at_other_contexts_compiles_from_the_same_export(runs, tmp_path, quant):
    """A context sweep exports, optimizes and quantizes once: compile rebuilds the phases
    at the run's contexts with the recorded quantization, and every kernel costs what it
    costs in a graph built at those contexts from the start."""
    first = runs[quant]
    config = first.run_dir.parent / "config.json"
    cache = f"run.cache_dir={first.run_dir.parent / 'cache'}"
    later = ("simulate.llm.prompt_tokens=40", "simulate.llm.new_tokens=6")
    moved = api.run("model=llm", f"model.config={config}", f"quant={quant}", *RUN, *later,
                    cache, run_dir=tmp_path / "moved")
    hits = json.loads((moved.run_dir / "cache.json").read_text())
    assert [hits[s] for s in ("export", "optimize", "quantize", "compile")] == \
        ["hit", "hit", "hit", "miss"]
    built = api.run("model=llm", f"model.config={config}", f"quant={quant}", *RUN, *later,
                    "model.prompt_tokens=40", "model.new_tokens=6", cache,
                    run_dir=tmp_path / "built")

    def kernels(result) -> dict:
        plan = json.loads((result.run_dir / "compile" / "plan.json").read_text())
        return {k["name"]: (k["target"], k["precision"], k["cost"]) for k in plan["kernels"]}
    assert kernels(moved) == kernels(built)
    for key in ("ttft_ms", "decode_tokens_per_s", "memory_mb"):
        assert moved.metrics[key] == built.metrics[key] != first.metrics[key]


def test_a_prompt_whose_mask_the_graph_cannot_hold_is_refused_before_it_is_built(
        runs, tmp_path, monkeypatch):
    """The prefill's causal mask is heads-per-key-head x prompt x prompt float32 values:
    past ``graph.MASK_LIMIT_BYTES`` the run stops in one line naming the key and the most
    this model takes, without allocating it (40,000 tokens of a 2-group model: 12 GiB)."""
    first = runs["fp16"]
    built = []
    monkeypatch.setattr(graph, "build", lambda *a: built.append(a))
    with pytest.raises(UserError) as err:
        api.run("model=llm", f"model.config={first.run_dir.parent / 'config.json'}",
                "quant=fp16", *RUN, "simulate.llm.prompt_tokens=40000",
                f"run.cache_dir={first.run_dir.parent / 'cache'}", run_dir=tmp_path / "a")
    line = str(err.value)
    assert line.startswith("simulate.llm.prompt_tokens: 40000 tokens") and "\n" not in line
    assert "at most 11585 prompt tokens" in line and not built
    s = spec.from_hf(TINY, "tiny")
    graph.check_context(s, 11585, 64, "k")  # the most it names is accepted
    with pytest.raises(UserError):
        graph.check_context(s, 11586, 64, "k")


def test_a_context_longer_than_the_config_gives_is_refused(tmp_path):
    """A config's max_position_embeddings (or its family's name for it) bounds prompt +
    new tokens, at export as at a retargeted compile."""
    short = spec.from_hf({**TINY, "n_positions": 18}, "config.json")
    assert short.max_positions == 18 and spec.from_hf(TINY, "c").max_positions == 0
    graph.check_context(short, 16, 2, "k")
    with pytest.raises(UserError, match=r"^k: 16 prompt \+ 3 new tokens .* 18 positions"):
        graph.check_context(short, 16, 3, "k")
    with pytest.raises(UserError, match="max_position_embeddings"):
        spec.from_hf({**TINY, "max_position_embeddings": -1}, "config.json")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY, "max_position_embeddings": 19}))
    with pytest.raises(UserError, match=r"^model\.prompt_tokens: 16 prompt \+ 4 new"):
        api.run("model=llm", f"model.config={config}", "quant=fp16", *RUN,
                run_dir=tmp_path / "a")


def test_a_one_token_prompt_is_another_graph(runs, tmp_path):
    first = runs["fp16"]
    with pytest.raises(UserError, match=r"model\.prompt_tokens=1"):
        api.run("model=llm", f"model.config={first.run_dir.parent / 'config.json'}",
                "quant=fp16", *RUN, "simulate.llm.prompt_tokens=1",
                f"run.cache_dir={first.run_dir.parent / 'cache'}", run_dir=tmp_path / "a")


def test_the_report_breaks_the_phases_and_the_memory_down(runs):
    result = runs["w8a8"]
    page = html_report.run_page(result.run_dir)
    m = result.metrics
    for table in ("llm_phases", "llm_memory"):
        assert f'id="{table}"' in page
    ttft = html_report._fmt(m["ttft_ms"])
    assert f"time to first token</td><td>{ttft}</td>" in page.replace(' class=""', "")
    assert f"<td>ttft_ms</td><td>{ttft}</td>" in page  # and among the headline metrics


def test_memory_is_the_weights_the_plan_holds_plus_the_cache(runs):
    """One figure per weight: the memory's layers are the compiled block's kernels' held
    bytes (at the precision: int8, int4 packed with a float32 scale per column, fp16), the
    same bytes each decode step streams, and the plan's own total agrees."""
    s = spec.from_hf(TINY, "tiny")
    mats = [(64, 64), (64, 32), (64, 32), (64, 64), (64, 128), (64, 128), (128, 64)]
    for q, precision in (("w8a8", phases.Precision(8, -1)), ("w4a16", phases.Precision(4, 0)),
                         ("fp16", phases.Precision(16, -1))):
        result = runs[q]
        plan = json.loads((result.run_dir / "compile" / "plan.json").read_text())
        block = [k for k in plan["kernels"] if k["name"].startswith("decode_first/")]
        matmuls = [k for k in block if k["gemm"] and k["weight_bytes"] > 64]
        assert sum(k["weight_bytes"] for k in matmuls) == sum(
            precision.matrix_bytes(r, c) for r, c in mats), q
        for k in matmuls:  # streamed whole every step: the memory's bytes are the cost's
            assert k["cost"]["weight_dram_bytes"] == k["weight_bytes"], (q, k["name"])
        assert plan["memory"]["weight_bytes"] == sum(
            k["weight_bytes"] for k in plan["kernels"] if k["target"] == "npu")
        parts = json.loads((result.run_dir / "simulate" / "llm.json").read_text())[
            "memory_bytes"]
        assert parts["weights.layers"] == 3 * sum(k["weight_bytes"] for k in block)
        m = result.metrics
        assert m["memory_weights_mb"] * phases.MB == pytest.approx(
            sum(v for k, v in parts.items() if k.startswith("weights.")))
        assert m["memory_kv_cache_mb"] * phases.MB == s.kv_bytes_per_token() * (16 + 4)
    mb = {q: runs[q].metrics["memory_weights_mb"] for q in runs}
    assert mb["w4a16"] < mb["w8a8"] < mb["fp16"]


def test_int4_weights_move_half_the_bytes_of_int8(runs):
    def head_weight_bytes(result) -> int:
        plan = json.loads((result.run_dir / "compile" / "plan.json").read_text())
        return sum(k["cost"]["weight_dram_bytes"] for k in plan["kernels"]
                   if k["name"].startswith("decode_first/") and "MatMul" in k["op_types"])
    int8, int4 = head_weight_bytes(runs["w8a8"]), head_weight_bytes(runs["w4a16"])
    assert int4 < 0.6 * int8  # packed two to a byte, plus one fp32 scale per column


def test_llm_keys_are_checked_where_they_are_defined(tmp_path):
    config = tmp_path / "config.json"
    config.write_text("{not json")
    with pytest.raises(UserError, match=r"model\.config"):
        api.run("model=llm", f"model.config={config}", *RUN, run_dir=tmp_path / "a")
    with pytest.raises(UserError, match=r"quant\.group_size"):
        api.run("model=qwen2_0_5b", "quant=w4a16", "quant.group_size=100", *RUN,
                run_dir=tmp_path / "b")
    with pytest.raises(UserError, match=r"model\.config"):
        api.run("model=llm", *RUN, run_dir=tmp_path / "c")
    with pytest.raises(UserError, match=r"simulate\.llm\.max_context=19'?: 19 positions, "
                       r"fewer than the run's 16 prompt \+ 4 new"):
        api.run("model=qwen2_0_5b", *RUN, "simulate.llm.max_context=19", run_dir=tmp_path / "d")
    assert not (tmp_path / "d" / "export").exists()  # at the door, before any stage


def test_each_precision_reports_what_it_costs_the_trained_proxy(runs):
    """Perplexity on held-out text of the decoder npuflow trains, under each run's own
    quantization: fp16 costs nothing measurable, int4 weights cost more than int8."""
    change = {q: runs[q].metrics["perplexity_change_pct"] for q in runs}
    base = {runs[q].metrics["perplexity_fp32"] for q in runs}
    assert len(base) == 1 and 1.0 < base.pop() < 8.0  # trained: far below 256 (chance)
    assert abs(change["fp16"]) < 0.1
    assert change["w4a16"] > change["w8a8"] > change["fp16"]


def test_the_proxy_block_is_the_one_the_phases_graph_builds():
    """The proxy decoder's ONNX form (the block builder every preset goes through)
    computes what the torch model it is trained as computes."""
    import torch

    from pipeline.llm import proxy

    params = proxy.init(3)  # untrained: the function, not its quality, is compared
    weights = {k: v.detach().numpy() for k, v in params.items()}
    window = proxy.corpus()[1][: proxy.SEQ]
    ours = proxy.logits(proxy.model(weights), weights["embed"], window)
    with torch.no_grad():
        theirs = proxy.forward(params, torch.from_numpy(window.astype(np.int64))[None])[0]
    assert np.allclose(ours, theirs.numpy(), atol=1e-4)
