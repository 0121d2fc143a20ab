"""Compressed size of a weight stream.

Vela compresses Ethos-U weights losslessly (its ``mlw_codec``: zero-point-removed values,
a palette and Golomb-Rice codes) and moves the compressed stream; the published figures
("Off-chip Flash used", flash access cycles) are compressed bytes. npuflow estimates the
compressed size as the Shannon entropy of the weights' value histogram (Shannon 1948:
no lossless code of independent symbols is shorter), so the estimate is a lower bound of
what a real encoder reaches, computed from the model's own quantized weights rather than
from an assumed ratio: trained int8 weights (peaked histograms) compress, uniform random
ones do not. Only integer weights are compressed; a stream never grows.
"""

from __future__ import annotations

import math

import numpy as np


def entropy_bytes(values: np.ndarray) -> int:
    """Bytes of an ideal entropy code of ``values`` (at most their raw size)."""
    flat = np.asarray(values).ravel()
    if flat.size == 0:
        return 0
    if not np.issubdtype(flat.dtype, np.integer):
        return int(flat.nbytes)
    _, counts = np.unique(flat, return_counts=True)
    p = counts / flat.size
    bits = float(-(p * np.log2(p)).sum())
    return min(int(flat.nbytes), math.ceil(bits * flat.size / 8))
