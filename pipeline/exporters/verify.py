"""The exported model against its framework's own output on the seeded input."""

from __future__ import annotations

import numpy as np
import onnx

from pipeline import onnx_io
from pipeline.errors import UserError

TOLERANCE = 1e-4  # max |onnx - framework| / max |framework|: float32 reassociation, not a bug


def seeded_input(shape: list[int], seed: int) -> np.ndarray:
    """The input the export stage's reference run feeds (onnx_io.seeded_feeds)."""
    return np.random.default_rng(seed).random(shape).astype(np.float32)


def max_error(model: onnx.ModelProto, x: np.ndarray, expected: list[np.ndarray],
              where: str) -> float:
    """Max abs error of the ONNX outputs against ``expected``; out of tolerance is an error
    (the exporter, not the user, got it wrong, but the user must know before trusting it)."""
    sess = onnx_io.session(model, where=where)
    got = onnx_io.run(sess, {sess.get_inputs()[0].name: x}, where)
    if len(got) != len(expected):
        raise UserError(f"{where}: the ONNX model has {len(got)} outputs, the framework "
                        f"{len(expected)}")
    worst = 0.0
    for a, b in zip(got, expected, strict=True):
        b = np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            raise UserError(f"{where}: exported output shape {list(a.shape)} differs from the "
                            f"framework's {list(b.shape)}")
        err = float(np.max(np.abs(a - b))) if a.size else 0.0
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        if err > TOLERANCE * max(scale, 1.0):
            raise UserError(f"{where}: the exported model's output differs from the "
                            f"framework's by {err:.3g} (max |output| {scale:.3g})")
        worst = max(worst, err)
    return worst
