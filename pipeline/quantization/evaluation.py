"""Scores of a model's outputs against the float model's and, when the data has labels,
against the labels with the configured metric (``eval``).

Every candidate the quantize stage judges (the final model, each layer quantized alone, each
step of the mixed-precision search) is scored here, by the same code, against one float
reference computed once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline import metrics as metric_components
from pipeline.errors import UserError
from pipeline.quantization.accuracy import cosine


def agreement(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    """Fraction of samples whose argmax over the last axis (per position of a sequence
    output) is the float model's everywhere."""
    return float(np.mean([np.array_equal(np.argmax(r, axis=-1), np.argmax(g, axis=-1))
                          for r, g in zip(ref, got, strict=True)]))


@dataclass
class Evaluator:
    reference: list[np.ndarray]  # the float model's first output per sample
    labels: np.ndarray | None
    metric: metric_components.Metric | None
    objective_key: str | None
    float_scores: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.labels is not None and self.metric is not None:
            self.float_scores = metric_components.score(self.metric, self.reference,
                                                         self.labels)
            if self.objective_key not in self.float_scores:
                raise UserError(f"eval.objective: '{self.objective_key}' is not a key the "
                                f"metric returns ({', '.join(self.float_scores)})")

    @property
    def labelled(self) -> bool:
        return bool(self.float_scores)

    def subset(self, count: int) -> Evaluator:
        """The same judge on the first ``count`` samples (the per-layer runs)."""
        labels = self.labels[:count] if self.labels is not None else None
        return Evaluator(self.reference[:count], labels, self.metric, self.objective_key)

    def scores(self, outputs: list[np.ndarray]) -> dict[str, float]:
        """output_cosine, top1_agreement and, with labels, the metric's keys and the float
        model's as ``<key>_float``."""
        ref = self.reference[: len(outputs)]
        out = {"top1_agreement": agreement(ref, outputs),
               "output_cosine": float(np.mean([cosine(r, g) for r, g in
                                               zip(ref, outputs, strict=True)]))}
        if self.labelled:
            assert self.metric is not None and self.labels is not None
            out.update(metric_components.score(self.metric, outputs, self.labels))
            out.update({f"{k}_float": v for k, v in self.float_scores.items()})
        return out

    def objective(self, scores: dict[str, float]) -> tuple[float, float]:
        """What the search maximises: the metric's objective, ties broken by the output
        cosine (a finer measure of the same closeness to fp32); without labels, the cosine."""
        if self.labelled:
            assert self.objective_key is not None
            return scores[self.objective_key], scores["output_cosine"]
        return scores["output_cosine"], 0.0

    def drop_points(self, scores: dict[str, float]) -> float:
        """Percentage points lost against fp32: of the objective with labels, else of top-1
        agreement (fp32 agrees with itself: 100%)."""
        if self.labelled:
            assert self.objective_key is not None
            return 100 * (self.float_scores[self.objective_key] - scores[self.objective_key])
        return 100 * (1.0 - scores["top1_agreement"])
