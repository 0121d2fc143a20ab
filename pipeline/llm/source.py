"""``model=llm``: the phases graph of a decoder-only model and what simulate needs of it.

The export records the spec, the phases' token counts and the LM head's chunking in
``model.json`` (``export.llm``), so simulate reads the model's shape from the run folder
the way it reads the plan.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import onnx
from omegaconf import DictConfig, OmegaConf

from pipeline.errors import UserError
from pipeline.llm import graph, spec


def spec_of(cfg: DictConfig) -> spec.LlmSpec:
    """The spec from ``model.config`` (a file) or ``model.hf`` (inline keys), not both."""
    inline = OmegaConf.to_container(cfg.hf, resolve=True) if cfg.get("hf") else {}
    if cfg.get("config") and inline:
        raise UserError("model.config: give a config.json or inline model.hf keys, not both")
    if cfg.get("config"):
        return spec.from_hf(spec.load(cfg.config), f"model.config {cfg.config}", cfg.name)
    if not inline:
        raise UserError("model.config: model=llm needs model.config=FILE.json (a Hugging Face "
                        "config.json) or a preset such as model=qwen3_0_6b")
    return spec.from_hf(inline, "model.hf", cfg.name)


def build(cfg: DictConfig) -> tuple[onnx.ModelProto, dict[str, Any]]:
    s = spec_of(cfg)
    columns, chunks = spec.lm_head_chunks(s.vocab_size)
    graph.check_context(s, cfg.prompt_tokens, cfg.new_tokens, "model.prompt_tokens")
    model = graph.build(s, cfg.prompt_tokens, cfg.new_tokens, cfg.seed)
    return model, {"llm": {**dataclasses.asdict(s), "params": s.params(),
                           "prompt_tokens": cfg.prompt_tokens, "new_tokens": cfg.new_tokens,
                           "seed": cfg.seed,
                           "lm_head_columns": columns, "lm_head_chunks": chunks}}


def recorded(inputs: dict[str, Path]) -> dict[str, Any] | None:
    """What export recorded of a language model (None: the run's model is not one)."""
    summary = inputs.get("export", Path("-")) / "model.json"
    if not summary.is_file():
        return None
    return json.loads(summary.read_text()).get("export", {}).get("llm")


def spec_from_record(info: dict[str, Any]) -> spec.LlmSpec:
    fields = {f.name for f in dataclasses.fields(spec.LlmSpec)}
    return spec.LlmSpec(**{k: v for k, v in info.items() if k in fields})
