"""Per-layer residuals of a calibration: measured layer times against npuflow's kernels.

The measured layers of a row are mapped onto the kernels of the plan compiled with the
prior (fusion and names do not depend on the profile's numbers), summed per kernel, and
compared with each kernel's predicted time at the parameters being tried. Weights: see
``pipeline.calibrate.fit`` (a row's layers count like one row).
"""

from __future__ import annotations

import math

from pipeline.calibrate.evaluate import Params, RowModel
from pipeline.calibrate.layers import LayerTime, kernel_times
from pipeline.errors import UserError


class LayerFit:
    def __init__(self, models: list[RowModel], layer_times: dict[int, list[LayerTime]],
                 prior: Params) -> None:
        self.models = models
        self.prior = prior
        self.measured: dict[int, dict[str, float]] = {}
        self.unmatched: dict[int, list[str]] = {}
        for row, layers in sorted(layer_times.items()):
            per_kernel, unmatched = kernel_times(layers, models[row].kernels(prior))
            if not per_kernel:
                raise UserError(f"layers: none of the {len(layers)} layers of measurements "
                                f"row {models[row].row.row} ({models[row].row.label}) names "
                                f"a node of npuflow's compiled graph (first: "
                                f"'{layers[0].node}', line {layers[0].line})")
            self.measured[row], self.unmatched[row] = per_kernel, unmatched

    def errors(self, row: int, params: Params) -> list[float]:
        """ln(predicted / measured) per measured kernel of one row."""
        predicted = self.models[row].kernel_us(params)
        return [math.log(predicted[k] / t) for k, t in sorted(self.measured.get(row, {}).items())
                if predicted.get(k, 0) > 0]

    def residuals(self, row: int, params: Params) -> list[float]:
        errors = self.errors(row, params)
        return [e / math.sqrt(len(errors)) for e in errors]

    def summary(self, fitted: Params) -> list[dict]:
        """Per row with layers: kernels fitted, layers left out, rms ln error before/after."""
        out = []
        for row in sorted(self.measured):
            before, after = self.errors(row, self.prior), self.errors(row, fitted)
            out.append({"row": self.models[row].row.label, "kernels": len(before),
                        "unmatched": self.unmatched[row][:5],
                        "unmatched_count": len(self.unmatched[row]),
                        "rms_before": _rms(before), "rms_after": _rms(after)})
        return out


def _rms(errors: list[float]) -> float:
    return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0
