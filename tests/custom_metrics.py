"""A metric a user writes: plugged in with eval.metric._target_, no change to npuflow."""

from __future__ import annotations

import numpy as np


def balanced_accuracy(outputs: list[np.ndarray], labels: np.ndarray) -> dict[str, float]:
    predicted = np.array([int(np.argmax(o)) for o in outputs])
    labels = np.asarray(labels, dtype=np.int64)
    recalls = [float(np.mean(predicted[labels == c] == c)) for c in np.unique(labels)]
    return {"balanced_accuracy": float(np.mean(recalls))}
