"""``quant=as_is``: a pre-quantized model keeps its own quantization, and its accuracy comes
from the runtime that defines its integers.

The compiled graph is the file's: a QOperator model is rewritten to QDQ with the same
integers (``qoperator``), a QDQ model (onnxruntime's, or npuflow's view of a TFLite file)
is kept as it is. Its outputs on the evaluation data come from LiteRT for a TFLite source
(the copy ``export`` keeps) and from onnxruntime for ONNX. With the float model it came
from (``model.float_path``, exported beside it as ``float.onnx``), the same comparisons
as for npuflow's own int8 are made: output cosine and top-1 agreement against it, the
float model's own accuracy with labels, and the accumulated per-layer error between the
two (the quantized side run in onnxruntime, which gives the TFLite files' values bit for
bit; ``pipeline/exporters/litert.py``). Without it, only the labelled metrics of the
quantized model are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from pipeline import metrics as metric_components
from pipeline import onnx_io
from pipeline.exporters import litert
from pipeline.model_source import FLOAT_FILE, TFLITE_FILE
from pipeline.quantization import accuracy, qoperator
from pipeline.quantization import layers as qlayers
from pipeline.quantization.evaluation import Evaluator
from pipeline.stages.base import StageInputs


def _upstream(inputs: StageInputs, name: str) -> Path | None:
    return next((folder / name for folder in inputs.values() if (folder / name).is_file()),
                None)


@dataclass
class Kept:
    """What keeping a model's own quantization measured."""
    metrics: dict[str, float]
    extra: dict[str, Any] = field(default_factory=dict)
    layer_rows: list[dict] = field(default_factory=list)


def keep(model: onnx.ModelProto, inputs: StageInputs, out_dir: Path,
         eval_feeds: list[dict], labels: np.ndarray | None,
         metric: metric_components.Metric | None, objective: str,
         layer_samples: int | None) -> Kept:
    """Write the model as the compiler reads it and measure it; ``layer_samples``: how many
    evaluation samples the per-layer analysis uses (None: no analysis)."""
    model = qoperator.to_qdq(model)
    onnx_io.save_model(model, out_dir / "model.onnx")
    tflite = _upstream(inputs, TFLITE_FILE)
    outputs = (litert.first_outputs(tflite, eval_feeds) if tflite
               else accuracy.run_outputs(model, eval_feeds))
    float_path = _upstream(inputs, FLOAT_FILE)
    extra: dict[str, Any] = {"runtime": "LiteRT" if tflite else "onnxruntime",
                             "float_model": bool(float_path)}
    if float_path is None:
        scores = (metric_components.score(metric, outputs, labels)
                  if metric is not None and labels is not None else {})
        return Kept(scores, extra)
    judge = Evaluator(accuracy.run_outputs(onnx.load(float_path), eval_feeds), labels, metric,
                      objective)
    kept = Kept(judge.scores(outputs), extra)
    if layer_samples:
        units = qlayers.layers(onnx.load(float_path), qlayers.quantized_tensors(model))
        errors, _ = accuracy.layer_errors(float_path, out_dir / "model.onnx",
                                          eval_feeds[:layer_samples])
        kept.layer_rows = accuracy.by_layer(units, errors, {})
        kept.extra["layers_matched"] = sum(1 for r in kept.layer_rows
                                           if r["cosine"] is not None)
    return kept
