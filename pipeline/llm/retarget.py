"""A language model compiled at the run's prompt and generation lengths without exporting,
optimizing and quantizing it again.

The phases graph (``pipeline.llm.graph``) is built, calibrated and quantized at the contexts
``model.prompt_tokens`` / ``model.new_tokens`` say; ``simulate.llm.*`` are the contexts a run
is costed at. When they differ, compile rebuilds the graph at the run's contexts and applies
the quantization the quantize stage recorded: the same scheme function, the same float
layers, and for int8 the same activation ranges (``quantize/calibration.json``). What a
context changes is shapes, rotary tables and the causal mask; the builder names every node
and tensor the same at any context, so the recorded ranges and layer names apply as they
are. A sweep over context lengths then runs export, optimize and quantize once
(``tests/test_llm.py`` holds a retargeted plan's kernels to a plan built at those contexts
from the start).

Why not transplant the new constants into the quantized file instead: int8 quantizes the
rotary tables and the mask as weights, so they would have to be re-quantized by hand;
applying the recorded recipe uses onnxruntime's quantizer for that, as the quantize stage
does.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import onnx
from omegaconf import DictConfig

from pipeline.errors import UserError
from pipeline.llm import graph
from pipeline.llm.source import spec_from_record
from pipeline.optimizer import graph_edit
from pipeline.quantization import schemes


def contexts(info: dict[str, Any]) -> tuple[int, int]:
    """The (prompt, new) token counts the export built the graph at."""
    return int(info["prompt_tokens"]), int(info["new_tokens"])


def at_contexts(info: dict[str, Any], quantize_dir: Path | None, scheme: str,
                quant: DictConfig, prompt: int, new: int) -> onnx.ModelProto:
    """The phases graph at ``prompt`` / ``new`` tokens, quantized as the quantize stage in
    ``quantize_dir`` quantized it at the export's contexts (``scheme``: the one it applied)."""
    if (prompt == 1) != (contexts(info)[0] == 1):
        # a one-token prompt has no transpose and no mask: another graph, not another shape
        raise UserError(f"simulate.llm: {prompt} prompt / {new} new tokens is another graph "
                        f"than the one built at {contexts(info)}: set model.prompt_tokens="
                        f"{prompt} model.new_tokens={new} to build it")
    spec = spec_from_record(info)
    graph.check_context(spec, prompt, new, "simulate.llm.prompt_tokens")
    model = graph_edit.infer_shapes(graph.build(spec, prompt, new, int(info.get("seed", 0))))
    if scheme == "none":
        return model
    if scheme == "fp16":
        return schemes.to_fp16(model)
    if scheme == "weight_only":
        return schemes.weight_only(model, quant)
    if scheme != "int8" or quantize_dir is None:
        raise UserError(f"simulate.llm: a language model quantized with scheme '{scheme}' is "
                        "compiled at the contexts it was built at; set model.prompt_tokens / "
                        "model.new_tokens to simulate.llm's")
    recorded = json.loads((quantize_dir / "accuracy.json").read_text())
    model = schemes.quantizable_opset(schemes.named(model))
    with tempfile.TemporaryDirectory() as tmp:
        float_path, out = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, float_path)
        schemes.quantize_int(float_path, out, quantize_dir / "calibration.json", quant,
                             list(recorded.get("float_layers", [])))
        return onnx.load(out)
