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


def _probabilities(x: np.ndarray, already: bool) -> np.ndarray:
    if already:
        return x.astype(np.float64)
    z = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def are_probabilities(outputs: list[np.ndarray]) -> bool:
    """Does the model end in a softmax (non-negative, rows summing to 1 within 1e-3)?"""
    return all(float(o.min()) >= 0 and np.allclose(o.sum(axis=-1), 1.0, atol=1e-3)
               for o in outputs)


def reference_confidence(ref: list[np.ndarray], got: list[np.ndarray], already: bool
                         ) -> float:
    """Mean probability ``got`` gives the float model's top class (per sample, per position
    of a sequence output); logits go through a softmax, a softmax's output is used as is.

    A continuous stand-in for top-1 agreement: one layer quantized alone rarely flips any
    of a few samples' answers (8 samples resolve 12.5 points of agreement or accuracy), but
    it always moves this probability, so layers can be told apart and ranked."""
    values = []
    for r, g in zip(ref, got, strict=True):
        top = np.argmax(r, axis=-1)[..., None]
        values.append(float(np.take_along_axis(_probabilities(g, already), top, -1).mean()))
    return float(np.mean(values))


@dataclass
class Evaluator:
    reference: list[np.ndarray]  # the float model's first output per sample
    labels: np.ndarray | None
    metric: metric_components.Metric | None
    objective_key: str | None
    float_scores: dict[str, float] = field(default_factory=dict)
    softmaxed: bool = field(init=False, default=False)  # the reference ends in a softmax

    def __post_init__(self) -> None:
        self.softmaxed = bool(self.reference) and are_probabilities(self.reference)
        if self.labels is not None and self.metric is not None:
            self.float_scores = metric_components.score(self.metric, self.reference,
                                                         self.labels)
            if self.objective_key not in self.float_scores:
                raise UserError(f"eval.objective: '{self.objective_key}' is not a key the "
                                f"metric returns ({', '.join(self.float_scores)})")

    @property
    def labelled(self) -> bool:
        return bool(self.float_scores)

    @property
    def classifies(self) -> bool:
        """Is top-1 agreement a meaningful figure? For one score vector per sample (a
        classifier's logits), or wherever labels say what the outputs are (a CTC
        recogniser's per-step classes); not for hidden states, maps or boxes (a BERT
        layer's 128 x 768 output, argmaxed, agrees by accident or not at all)."""
        if self.labelled:
            return True
        first = self.reference[0] if self.reference else None
        return first is not None and 1 <= first.ndim <= 2 and first.shape[-1] >= 2

    def near_chance(self) -> str | None:
        """A warning when the float model itself scores about what guessing would (within
        1.5x of 1 / classes on a classifier's top-1): the quantized figures beside it mean
        nothing until the preprocessing or the labels are right."""
        top1 = self.float_scores.get("accuracy_top1", self.float_scores.get("accuracy"))
        first = self.reference[0] if self.reference else None
        if top1 is None or first is None or not 1 <= first.ndim <= 2 or first.shape[-1] < 2:
            return None
        chance = 1.0 / first.shape[-1]
        if top1 > 1.5 * chance:
            return None
        return (f"the float model's top-1 on these labels is {top1:.3f}, about chance for "
                f"{first.shape[-1]} classes ({chance:.3f}): check the data's preprocessing "
                "(data.scale, data.mean / data.std, channel order, layout) and its labels "
                "before reading the quantized figures")

    def subset(self, count: int) -> Evaluator:
        """The same judge on the first ``count`` samples (the per-layer runs)."""
        labels = self.labels[:count] if self.labels is not None else None
        return Evaluator(self.reference[:count], labels, self.metric, self.objective_key)

    def scores(self, outputs: list[np.ndarray]) -> dict[str, float]:
        """output_cosine, top1_agreement and, with labels, the metric's keys and the float
        model's as ``<key>_float``."""
        ref = self.reference[: len(outputs)]
        out = {"output_cosine": float(np.mean([cosine(r, g) for r, g in
                                               zip(ref, outputs, strict=True)]))}
        if self.classifies:
            out["top1_agreement"] = agreement(ref, outputs)
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
        agreement (fp32 agrees with itself: 100%), else of the output cosine."""
        if self.labelled:
            assert self.objective_key is not None
            return 100 * (self.float_scores[self.objective_key] - scores[self.objective_key])
        if "top1_agreement" in scores:
            return 100 * (1.0 - scores["top1_agreement"])
        return 100 * (1.0 - scores["output_cosine"])

    def confidence_drop_points(self, outputs: list[np.ndarray]) -> float:
        """Points of probability ``outputs`` lose on the float model's top class against the
        float model's own (``reference_confidence``), for classifiers; else points of output
        cosine lost. Unlike ``drop_points`` it resolves a single layer on a few samples."""
        ref = self.reference[: len(outputs)]
        if not self.classifies:
            return 100 * (1.0 - float(np.mean([cosine(r, g) for r, g in
                                               zip(ref, outputs, strict=True)])))
        return 100 * (reference_confidence(ref, ref, self.softmaxed)
                      - reference_confidence(ref, outputs, self.softmaxed))
