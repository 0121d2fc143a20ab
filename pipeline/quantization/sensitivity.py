"""Each layer quantized alone (the rest float): its own error and the model's.

This is the isolated analysis of RKNN-Toolkit2's accuracy_analysis and the ranking automatic
mixed precision starts from. One run per layer, kept cheap: the model is re-quantized from
the range cache (no calibration), run on the first ``samples`` evaluation samples, and the
same run returns the layer's own quantized output, compared with a float run of every
layer's output made once (on ``layer_samples`` samples).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from omegaconf import DictConfig

from pipeline import onnx_io
from pipeline.quantization import schemes
from pipeline.quantization.accuracy import cosine
from pipeline.quantization.evaluation import Evaluator
from pipeline.quantization.layers import Layer, post_qdq, with_outputs
from pipeline.reports.terminal import task


def _flat(values: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([v.ravel() for v in values])


def float_layer_outputs(model: onnx.ModelProto, layers: list[Layer], feeds: list[dict]
                        ) -> dict[str, np.ndarray]:
    """Every layer's float output on ``feeds``, flattened (one run of the float model)."""
    names = [layer.tensor for layer in layers]
    sess = onnx_io.session(with_outputs(model, names))
    order = [o.name for o in sess.get_outputs()]
    runs = onnx_io.run_all(sess, feeds)
    return {n: _flat([r[order.index(n)] for r in runs]) for n in names}


def isolated(float_path: Path, cache: Path, q: DictConfig, tmp: Path, layers: list[Layer],
             feeds: list[dict], judge: Evaluator, float_outputs: dict[str, np.ndarray],
             layer_samples: int) -> dict[str, dict]:
    """Per layer name: ``cosine`` of its own output, ``scores`` of the model output, its
    ``drop_points`` against fp32 on the same samples and its ``confidence_drop_points``
    (the figure that still tells layers apart when no sample's answer flips)."""
    out: dict[str, dict] = {}
    with task("quantize: each layer alone", len(layers)) as step:
        for i, layer in enumerate(layers):
            path = tmp / f"only_{i}.onnx"
            schemes.quantize_int(float_path, path, cache, q, [], only=list(layer.nodes))
            model = onnx.load(path)
            watched = post_qdq(model, layer.tensor) or layer.tensor
            sess = onnx_io.session(with_outputs(model, [watched]))
            index = [o.name for o in sess.get_outputs()].index(watched)
            runs = onnx_io.run_all(sess, feeds)
            own = _flat([r[index] for r in runs[:layer_samples]])
            outputs = [r[0] for r in runs]
            scores = judge.scores(outputs)
            out[layer.name] = {"cosine": cosine(float_outputs[layer.tensor], own),
                               "scores": scores, "drop_points": judge.drop_points(scores),
                               "confidence_drop_points": judge.confidence_drop_points(outputs)}
            path.unlink()
            step(f"quantize: each layer alone ({layer.name})")
    return out
