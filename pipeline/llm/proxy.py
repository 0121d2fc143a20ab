"""What a precision costs a language model in perplexity, measured on one npuflow trains.

A preset's weights are seeded noise: its graph and bytes are the model's, its perplexity is
meaningless. So the accuracy axis of a precision sweep comes from a small decoder trained
here on text every Python ships (``pydoc_data.topics``, the language reference's topics:
466 KB of English and code), byte by byte: 2 layers, hidden 64, 4 query heads sharing 2
key/value heads, a gated SiLU MLP 256 wide (so 128-row groups split its down projection),
rotary positions, the same block ``pipeline.llm.graph``
builds. It trains in seconds with torch (the ``test`` extra), single-threaded and seeded;
its weights go into the same ONNX block, the run's own quantization (``quant=w8a8``,
``w4a16``, ...: ``pipeline.quantization.schemes``) quantizes it, and onnxruntime measures
the perplexity of the held-out tenth of the text. ``perplexity_change_pct`` is that against
the float32 model: a proxy for how the precision treats a trained decoder, said as such.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from pipeline import onnx_io
from pipeline.llm import graph as llm_graph
from pipeline.llm.layers import rope_tables
from pipeline.llm.spec import LlmSpec
from pipeline.zoo.builder import GraphBuilder

SPEC = LlmSpec(name="npuflow_proxy", hidden_size=64, num_layers=2, num_heads=4,
               num_kv_heads=2, head_dim=16, intermediate_size=256, vocab_size=256,
               tie_word_embeddings=False, attention_bias=False, qk_norm=False,
               sandwich_norm=False, gated_mlp=True, activation="silu")
SEQ, BATCH, STEPS, EVAL_WINDOWS = 64, 32, 600, 48
VERSION = "1"  # bump when the recipe changes: the trained weights are cached by it


def corpus() -> tuple[np.ndarray, np.ndarray]:
    """The training nine tenths and the held-out tenth of the topics, as bytes."""
    from pydoc_data.topics import topics

    data = np.frombuffer("".join(topics[k] for k in sorted(topics)).encode(), np.uint8)
    cut = len(data) * 9 // 10
    return data[:cut], data[cut:]


def init(seed: int = 0) -> dict[str, Any]:
    """The proxy's parameters before training (torch, seeded)."""
    import torch

    torch.manual_seed(seed)
    s, h = SPEC, SPEC.hidden_size

    def param(*shape: int, scale: float) -> torch.nn.Parameter:
        return torch.nn.Parameter(torch.randn(*shape) * scale)

    p: dict[str, Any] = {"embed": param(256, h, scale=0.5)}
    for i in range(s.num_layers):
        for name, (n_in, n_out) in {"q": (h, s.q_size), "k": (h, s.kv_size),
                                    "v": (h, s.kv_size), "o": (s.q_size, h),
                                    "gate": (h, s.intermediate_size),
                                    "up": (h, s.intermediate_size),
                                    "down": (s.intermediate_size, h)}.items():
            p[f"{i}.{name}"] = param(n_in, n_out, scale=1 / math.sqrt(n_in))
        p[f"{i}.attn_norm"] = torch.nn.Parameter(torch.ones(h))
        p[f"{i}.mlp_norm"] = torch.nn.Parameter(torch.ones(h))
    p["final_norm"] = torch.nn.Parameter(torch.ones(h))
    p["head"] = param(h, 256, scale=1 / math.sqrt(h))
    return p


def forward(p: dict[str, Any], tokens: Any) -> Any:
    """Logits of a batch of byte windows ([batch, SEQ]): the block of
    ``pipeline.llm.graph`` in torch (LayerNorm without bias, rotary halves, grouped heads,
    the additive causal mask), so the exported graph computes the same function."""
    import torch

    s, h, d = SPEC, SPEC.hidden_size, SPEC.head_dim
    group = s.num_heads // s.num_kv_heads
    cos, sin = (torch.from_numpy(a) for a in rope_tables(d, 0, SEQ))
    mask = torch.triu(torch.full((SEQ, SEQ), llm_graph.MASKED), diagonal=1)

    def rot(x: torch.Tensor) -> torch.Tensor:
        a, b = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-b, a], dim=-1) * sin

    def norm(x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (h,), gain, None, 1e-6)

    x = p["embed"][tokens]
    n = tokens.shape[0]
    for i in range(s.num_layers):
        xn = norm(x, p[f"{i}.attn_norm"])
        q = (xn @ p[f"{i}.q"]).view(n, SEQ, s.num_heads, d).transpose(1, 2)
        k = (xn @ p[f"{i}.k"]).view(n, SEQ, s.num_kv_heads, d).transpose(1, 2)
        v = (xn @ p[f"{i}.v"]).view(n, SEQ, s.num_kv_heads, d).transpose(1, 2)
        q, k = rot(q), rot(k)
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + mask, dim=-1)
        x = x + (att @ v).transpose(1, 2).reshape(n, SEQ, s.q_size) @ p[f"{i}.o"]
        xn = norm(x, p[f"{i}.mlp_norm"])
        gate = xn @ p[f"{i}.gate"]
        x = x + (gate * torch.sigmoid(gate) * (xn @ p[f"{i}.up"])) @ p[f"{i}.down"]
    return norm(x, p["final_norm"]) @ p["head"]


def train(seed: int = 0) -> dict[str, np.ndarray]:
    """Weights after ``STEPS`` of Adam on random windows of the training text."""
    import torch

    torch.set_num_threads(1)
    p = init(seed)
    text, _ = corpus()
    data = torch.from_numpy(text.astype(np.int64))
    opt = torch.optim.Adam(p.values(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(STEPS):
        starts = torch.randint(0, len(data) - SEQ - 1, (BATCH,), generator=gen)
        batch = torch.stack([data[i: i + SEQ + 1] for i in starts.tolist()])
        logits = forward(p, batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256),
                                                 batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().numpy().copy() for k, v in p.items()}


def model(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The trained decoder as ONNX: embedded tokens in, logits out, every layer the
    block ``pipeline.llm.graph`` builds, with its own weights."""
    g = GraphBuilder("npuflow_proxy", 0, llm_graph.OPSET)
    x = g.input("embedded", (1, SEQ, SPEC.hidden_size))
    zero_h = g.const("norm_bias", np.zeros(SPEC.hidden_size, np.float32))
    for i in range(SPEC.num_layers):
        w = llm_graph.Weights.given(g, SPEC, {name: weights[f"{i}.{name}"] for name in
                                              ("q", "k", "v", "o", "gate", "up", "down",
                                               "attn_norm", "mlp_norm")}, zero_h)
        g.prefix = f"layer{i}/"
        x, _, _ = llm_graph.block_body(g, w, SPEC, x, SEQ, 0)
    g.prefix = ""
    final = g.const("final_norm", weights["final_norm"])
    head = g.const("w_lm_head", weights["head"])
    g.output(g.matmul(llm_graph.norm(g, x, final, zero_h), head))
    built = g.build()
    built.ir_version = 10
    return built


def _session(onnx_model: onnx.ModelProto) -> Any:
    """npuflow's own session: one thread (bit-exact from run to run), a QDQ graph as
    written (its 8-bit products summed exactly on every CPU: ``onnx_io.session_options``)."""
    return onnx_io.session(onnx_model, where="the proxy decoder")


def logits(onnx_model: onnx.ModelProto, embed: np.ndarray, window: np.ndarray) -> np.ndarray:
    """The model's logits for one window of ``SEQ`` bytes, in onnxruntime."""
    feed = {"embedded": embed[window.astype(np.int64)][None].astype(np.float32)}
    return _session(onnx_model).run(None, feed)[0][0]


def perplexity(onnx_model: onnx.ModelProto, embed: np.ndarray) -> float:
    """exp(mean next-byte cross-entropy) over ``EVAL_WINDOWS`` held-out windows."""
    session = _session(onnx_model)
    _, held_out = corpus()
    stride = (len(held_out) - SEQ - 1) // EVAL_WINDOWS
    nll, count = 0.0, 0
    for w in range(EVAL_WINDOWS):
        window = held_out[w * stride: w * stride + SEQ + 1].astype(np.int64)
        logits = session.run(None, {"embedded": embed[window[:-1]][None]})[0][0]
        logits = logits.astype(np.float64)
        top = logits.max(axis=-1, keepdims=True)
        logp = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
        nll -= logp[np.arange(SEQ), window[1:]].sum()
        count += SEQ
    return float(math.exp(nll / count))


def trained(cache_dir: str | Path, seed: int = 0) -> dict[str, np.ndarray]:
    """The trained weights, from ``cache_dir`` when this recipe trained them before."""
    key = hashlib.sha256(json.dumps([VERSION, SEQ, BATCH, STEPS, seed]).encode()).hexdigest()
    path = Path(cache_dir) / "llm_proxy" / f"{key[:16]}.npz"
    if path.is_file():
        with np.load(path) as saved:
            return {k: saved[k] for k in saved.files}
    weights = train(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as tmp:
        np.savez(tmp, **weights)
    Path(tmp.name).replace(path)  # whole or not at all
    return weights


def precision_change(quant: Any, cache_dir: str | Path, seed: int = 0) -> dict[str, float]:
    """The proxy's perplexity in float32 and under ``quant`` (the run's quant config)."""
    from pipeline.quantization import schemes

    weights = trained(cache_dir, seed)
    float_model = model(weights)
    base = perplexity(float_model, weights["embed"])
    scheme = str(quant.scheme)
    if scheme == "weight_only":
        quantized = schemes.weight_only(model(weights), quant)
    elif scheme == "fp16":
        quantized = schemes.to_fp16(float_model)
    elif scheme in ("int8", "auto"):
        quantized = _int8(float_model, weights["embed"], quant)
    else:
        quantized = float_model
    ppl = perplexity(quantized, weights["embed"])
    return {"perplexity_fp32": base, "perplexity": ppl,
            "perplexity_change_pct": 100 * (ppl / base - 1)}


def _int8(float_model: onnx.ModelProto, embed: np.ndarray, quant: Any) -> onnx.ModelProto:
    """onnxruntime's static int8 quantization, calibrated on training windows."""
    from pipeline.quantization import schemes

    text, _ = corpus()
    rng = np.random.default_rng(0)
    feeds = [{"embedded": embed[text[i: i + SEQ].astype(np.int64)][None]}
             for i in rng.integers(0, len(text) - SEQ, 16)]
    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(float_model, path)
        cache = Path(tmp) / "calibration.json"
        schemes.calibrate(path, feeds, quant, cache)
        schemes.quantize_int(path, out, cache, quant, [])
        return onnx.load(out)
