"""``model=tflite``: a TFLite file (int8, int16x8 or float) as the pipeline's ONNX, with the
file's own quantization (``tflite_reader``, ``tflite_onnx``), checked against LiteRT.

The check runs the ONNX graph in onnxruntime (a QDQ graph as written, its 8-bit products
summed exactly on every CPU: ``onnx_io.session_options``) and the file in LiteRT on
the same seeded input and compares the outputs in the file's own units: for a quantized
output, in quantization steps (the two are equal on MLPerf Tiny's files and the seeded
Keras networks; the tests hold every output within one step), for a float output, relative
to the output's range. A difference beyond that is an error, not a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from omegaconf import DictConfig

from pipeline import onnx_io
from pipeline.errors import UserError
from pipeline.exporters import litert, tflite_onnx, tflite_reader

MAX_STEPS = 1.0  # quantized outputs: at most one quantization step apart
MAX_RELATIVE = 1e-4  # float outputs: of the output's largest magnitude


def export(cfg: DictConfig) -> tuple[onnx.ModelProto, dict[str, Any]]:
    if not cfg.path:
        raise UserError("model.path: model=tflite needs model.path=FILE.tflite")
    path = onnx_io.resolve_path(cfg.path)
    model = tflite_onnx.convert(tflite_reader.read(path))
    difference = _against_litert(model, path, cfg.seed)
    try:
        from importlib.metadata import version

        runtime = f"ai-edge-litert {version('ai-edge-litert')}"
    except Exception:  # an unusual install without metadata
        runtime = "ai-edge-litert"
    return model, {"exporter": "npuflow tflite_onnx", "framework": runtime,
                   "max_abs_error_vs_framework": difference["max_abs"],
                   "max_steps_vs_framework": difference["max_steps"],
                   "tflite_path": str(path)}


def _against_litert(model: onnx.ModelProto, path: Path, seed: int) -> dict[str, float]:
    where = f"model.path '{path}'"
    sess = onnx_io.session(model, where=where)
    feeds = onnx_io.seeded_feeds(sess, seed)
    ours = onnx_io.run(sess, feeds, where)
    runner = litert.Runner(path)
    theirs = runner.run(feeds)
    max_abs, max_steps = 0.0, 0.0
    for detail, a, b in zip(runner.outputs, ours, theirs, strict=True):
        diff = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
        max_abs = max(max_abs, diff)
        scale = detail["quantization"][0]
        if scale:
            steps = diff / scale
            max_steps = max(max_steps, steps)
            bad = steps > MAX_STEPS + 1e-6
        else:
            bad = diff > MAX_RELATIVE * max(float(np.max(np.abs(b))), 1e-12)
        if bad:
            raise UserError(f"{where}: npuflow's ONNX of output '{detail['name']}' differs "
                            f"from LiteRT's by {diff:.3g} ({max_steps:.1f} steps); the "
                            "conversion of one of its ops is wrong, please report it")
    return {"max_abs": max_abs, "max_steps": max_steps}
