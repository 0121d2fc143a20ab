"""Top-k accuracy of a classifier (the default ``eval`` metric)."""

from __future__ import annotations

import numpy as np

from pipeline.errors import UserError


def class_scores(outputs: list[np.ndarray]) -> np.ndarray:
    """[samples, classes]: each sample's first output, one row per image of its batch."""
    return np.concatenate([np.asarray(o).reshape(-1, np.asarray(o).shape[-1]) for o in outputs])


def check_labels(labels: np.ndarray, classes: int) -> np.ndarray:
    if labels.dtype == object:
        example = next(iter(labels), "")
        raise UserError(f"data: labels are text (e.g. '{example}'); top-k needs class indices: "
                        "set data.classes=[...] in the model's output order, or eval=ctc "
                        "for a text recogniser")
    labels = labels.astype(np.int64)
    bad = labels[(labels < 0) | (labels >= classes)]
    if bad.size:
        raise UserError(f"data: label {int(bad[0])} does not match the model's output of "
                        f"{classes} classes (class folders / data.classes must follow the "
                        "model's output order)")
    return labels


def top_k(outputs: list[np.ndarray], labels: np.ndarray, k: tuple[int, ...] = (1, 5)
          ) -> dict[str, float]:
    """``accuracy_top{k}``: the label among the k highest scores (ties by index, as
    ``np.argsort`` is stable on the negated scores). A k not below the number of classes
    is left out: it would be 1.0 whatever the model does."""
    scores = class_scores(outputs)
    labels = check_labels(np.asarray(labels), scores.shape[1])
    if len(labels) != len(scores):
        raise UserError(f"data: {len(labels)} labels for {len(scores)} outputs")
    ranked = np.argsort(-scores, axis=1, kind="stable")
    out = {}
    for kk in sorted({int(v) for v in k}):
        if kk == 1 or kk < scores.shape[1]:
            hit = (ranked[:, :kk] == labels[:, None]).any(axis=1)
            out[f"accuracy_top{kk}"] = float(hit.mean())
    return out
