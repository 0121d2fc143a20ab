"""Numerical equivalence of two models in onnxruntime on seeded inputs.

Both sides run with onnxruntime's own graph optimizations off: otherwise the reference
session would fold BatchNorm itself and hide the rounding a folding pass introduces."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from pipeline import onnx_io


@dataclass(frozen=True)
class Difference:
    max_abs: float
    max_rel: float  # max |a - b| / max |a| per output, worst output

    def within(self, rel_tol: float, abs_tol: float) -> bool:
        """Equivalent when the relative error is within ``rel_tol``, or the absolute error
        is at float32's rounding floor ``abs_tol``: an output that is ~0 everywhere (a
        detector's score map on random inputs, max 1e-5) makes the relative error of pure
        rounding (2e-7) look like 2%."""
        return self.max_rel <= rel_tol or self.max_abs <= abs_tol


def reference_outputs(model: onnx.ModelProto, seed: int, samples: int = 2
                      ) -> tuple[list[dict], list[list[np.ndarray]]]:
    sess = onnx_io.session(model, optimized=False)
    feeds = [onnx_io.seeded_feeds(sess, seed + i) for i in range(samples)]
    return feeds, onnx_io.run_all(sess, feeds)


def compare(model: onnx.ModelProto | bytes, feeds: list[dict], expected: list[list[np.ndarray]],
            where: str) -> Difference:
    sess = onnx_io.session(model, where=where, optimized=False)
    worst_abs = worst_rel = 0.0
    for ref, got in zip(expected, onnx_io.run_all(sess, feeds, where), strict=True):
        for a, b in zip(ref, got, strict=True):
            if a.shape != b.shape:
                return Difference(float("inf"), float("inf"))
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) \
                if a.size else 0.0
            scale = float(np.max(np.abs(a))) if a.size else 0.0
            worst_abs = max(worst_abs, diff)
            worst_rel = max(worst_rel, diff / scale if scale else diff)
    return Difference(worst_abs, worst_rel)
