"""scikit-learn's 8x8 handwritten digits (1,797 labelled images that ship with the package).

One split and one preprocessing function serve training, calibration and evaluation, so
the calibration data is preprocessed exactly as the model was trained (the seeds' first
cause of int8 accuracy loss is a preprocessing mismatch).
"""

from __future__ import annotations

import numpy as np

HELD_OUT_FRACTION = 0.25


def preprocess(pixels: np.ndarray) -> np.ndarray:
    """Raw digit pixels (0..16) -> float32 in [0, 1], flattened to 64 features."""
    return (np.asarray(pixels, dtype=np.float32) / 16.0).reshape(len(pixels), 64)


def split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_x, train_y, held_out_x, held_out_y), stratified and seeded, preprocessed."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=HELD_OUT_FRACTION, random_state=seed, stratify=y
    )
    return preprocess(x_tr), y_tr.astype(np.int64), preprocess(x_te), y_te.astype(np.int64)
