"""Text-line accuracy of a CTC recogniser by greedy (best-path) decoding.

Decoding as PaddleOCR's ``CTCLabelDecode`` (``ppocr/postprocess/rec_postprocess.py``; the
same in rapidocr's ``ch_ppocr_rec/utils.py``): argmax per time step, merge repeats, drop the
blank; the class list is [blank] + characters (+ ' ' when ``use_space_char``). Scores:
``line_accuracy`` (the decoded line equals the label) and ``char_accuracy`` = 1 - total edit
distance / total label characters (the complement of the character error rate, clipped
at 0), the two figures OCR papers report.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pipeline.errors import UserError


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, one row of the dynamic programme (strings of a text line; a
    library for ten lines would be a dependency for nothing)."""
    if len(a) < len(b):
        a, b = b, a
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        diag, row[0] = row[0], i
        for j, cb in enumerate(b, start=1):
            diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diag + (ca != cb))
    return row[-1]


class CTCGreedy:
    def __init__(self, metadata: Mapping[str, str] | None = None,
                 metadata_key: str = "character", characters: str | None = None,
                 blank: int = 0, space: bool = True) -> None:
        if characters:
            path = Path(characters)
            if not path.is_file():
                raise UserError(f"eval.metric.characters: no such file '{characters}'")
            chars = path.read_text(encoding="utf-8").splitlines()
        elif metadata and metadata_key in metadata:
            chars = metadata[metadata_key].splitlines()
        else:
            raise UserError(f"eval.metric: the model has no metadata key '{metadata_key}'; "
                            "give the character list as eval.metric.characters=FILE")
        chars = [*chars, " "] if space else chars
        self.blank = blank
        self.table = [*chars[:blank], "<blank>", *chars[blank:]]

    def decode(self, probs: np.ndarray) -> str:
        probs = np.asarray(probs)
        if probs.shape[-1] != len(self.table):
            raise UserError(f"eval=ctc: the character list gives {len(self.table)} classes "
                            f"(blank and space included), the model outputs {probs.shape[-1]}")
        best = probs.reshape(-1, probs.shape[-1]).argmax(axis=1)
        keep = np.ones(len(best), bool)
        keep[1:] = best[1:] != best[:-1]
        keep &= best != self.blank
        return "".join(self.table[i] for i in best[keep])

    def __call__(self, outputs: list[np.ndarray], labels: np.ndarray) -> dict[str, float]:
        labels = np.asarray(labels)
        if labels.dtype != object:
            raise UserError("eval=ctc: labels must be text lines (data=image_list with a "
                            "text label per image)")
        texts = [self.decode(o) for o in outputs]
        errors = sum(edit_distance(t, str(y)) for t, y in zip(texts, labels, strict=True))
        chars = max(1, sum(len(str(y)) for y in labels))
        return {"line_accuracy": float(np.mean([t == y for t, y in zip(texts, labels,
                                                                          strict=True)])),
                "char_accuracy": max(0.0, 1.0 - errors / chars)}
