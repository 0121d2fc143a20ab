"""Calibration and evaluation data for the quantize stage (the ``data`` config group).

One :func:`preprocess_image` serves calibration and evaluation alike: the seeds' first
cause of int8 accuracy loss is calibration data preprocessed differently from inference
data (mean/std, RGB/BGR, layout). Splits are seeded and disjoint. Every sample is checked
against the model input (shape, finite values) before use, with errors naming the file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from pipeline.datasets import digits, labelled
from pipeline.datasets.images import IMAGE_SUFFIXES, preprocess_image
from pipeline.errors import UserError

log = logging.getLogger(__name__)


@dataclass
class Dataset:
    calibration: list[dict[str, np.ndarray]]
    evaluation: list[dict[str, np.ndarray]]
    labels: np.ndarray | None  # for evaluation samples, when the data has them

    def feeds(self, split: str) -> list[dict[str, np.ndarray]]:
        return self.calibration if split == "calibration" else self.evaluation


@dataclass(frozen=True)
class ModelInput:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


def _synthetic(inputs: list[ModelInput], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """N(0, 1) for float inputs, zeros for integer / boolean ones (indices, masks)."""
    return {i.name: rng.standard_normal(i.shape).astype(i.dtype)
            if np.issubdtype(i.dtype, np.floating) else np.zeros(i.shape, i.dtype)
            for i in inputs}


def _check(sample: np.ndarray, shape: tuple[int, ...], where: str) -> np.ndarray:
    if tuple(sample.shape) != tuple(shape):
        raise UserError(f"{where}: shape {list(sample.shape)} does not match the model input "
                        f"{list(shape)}")
    if not np.all(np.isfinite(sample)):
        raise UserError(f"{where}: contains NaN or infinite values")
    return sample.astype(np.float32)


def _enough(count: int, cfg: DictConfig, where: str) -> None:
    """Accuracy measured on the images the ranges were calibrated on flatters the
    quantized model, so a source too small for ``data.calibration_size`` plus one
    evaluation sample is refused, saying how many it needs."""
    if not count:
        raise UserError(f"{where}: no samples found")
    n_cal = cfg.calibration_size
    if count <= n_cal:
        raise UserError(f"{where}: {count} sample(s) cannot give data.calibration_size="
                        f"{n_cal} calibration samples and evaluation samples apart from them; "
                        f"add at least {n_cal + 1 - count} or set data.calibration_size="
                        f"{max(1, count // 2)}")


def _split(count: int, cfg: DictConfig, where: str) -> tuple[list[int], list[int]]:
    """Seeded, disjoint calibration / evaluation indices (``_enough`` of them); a source
    with fewer than ``data.eval_size`` left evaluates on what is left, with a warning."""
    _enough(count, cfg, where)
    n_cal = cfg.calibration_size
    order = [int(i) for i in np.random.default_rng(cfg.seed).permutation(count)]
    evaluation = order[n_cal:][: cfg.eval_size]
    if len(evaluation) < cfg.eval_size:
        log.warning("%s: %d sample(s) left for evaluation after %d for calibration "
                    "(data.eval_size=%d)", where, len(evaluation), n_cal, cfg.eval_size)
    return order[:n_cal], evaluation


def _folder(cfg: DictConfig) -> Path:
    folder = Path(cfg.path or "")
    if not cfg.path:
        raise UserError(f"data.path: missing (data={cfg.kind} needs data.path=FOLDER)")
    if not folder.is_dir():
        raise UserError(f"data.path: '{cfg.path}' is not a folder (data={cfg.kind} needs one)")
    return folder


def source_files(cfg: DictConfig) -> list[Path]:
    """The files a data config reads (their contents key the quantize stage's cache entry);
    listing them is also the door's check that the source is well formed."""
    found = labelled.listing(cfg)
    if found is not None:
        _enough(len(found.files), cfg, f"data.path '{cfg.path}'")
        extra = [Path(cfg.path)] if cfg.kind == "image_list" else []
        return extra + found.files
    if cfg.kind in ("images", "npy"):
        files = sorted(p for p in _folder(cfg).iterdir() if p.suffix.lower() in
                       (IMAGE_SUFFIXES if cfg.kind == "images" else (".npy",)))
        _enough(len(files), cfg, f"data.path '{cfg.path}'")
        return files
    return []


def _npy(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.load(path)
    arr = arr[None] if arr.ndim == len(shape) - 1 else arr
    return _check(arr, shape, str(path))


def load(cfg: DictConfig, inputs: list[ModelInput]) -> Dataset:
    kind = cfg.kind
    if kind == "synthetic":
        rng = np.random.default_rng(cfg.seed)
        cal = [_synthetic(inputs, rng) for _ in range(cfg.calibration_size)]
        return Dataset(cal, [_synthetic(inputs, rng) for _ in range(cfg.eval_size)], None)
    if len(inputs) != 1 or inputs[0].dtype != np.float32:
        raise UserError(f"data={kind} feeds one float32 input; the model has "
                        f"{', '.join(f'{i.name} ({i.dtype})' for i in inputs)}")
    name, shape = inputs[0].name, inputs[0].shape
    if kind == "digits":
        x_tr, _, x_te, y_te = digits.split(cfg.seed)
        cal = [{name: _check(x[None], shape, "data=digits")} for x in x_tr[: cfg.calibration_size]]
        ev = [{name: _check(x[None], shape, "data=digits")} for x in x_te[: cfg.eval_size]]
        return Dataset(cal, ev, y_te[: cfg.eval_size])
    found = labelled.listing(cfg)
    files = found.files if found is not None else source_files(cfg)
    cal_idx, ev_idx = _split(len(files), cfg, f"data.path '{cfg.path}'")
    read = _npy if kind == "npy" else (
        lambda p, s: _check(preprocess_image(p, cfg, s), s, str(p)))
    decoded = {i: read(files[i], shape) for i in dict.fromkeys(cal_idx + ev_idx)}
    labels = found.labels[ev_idx] if found is not None else None
    if labels is not None and labels.dtype != object and len(np.unique(labels)) == 1:
        only = found.classes[int(labels[0])] if found.classes else str(labels[0])
        log.warning("data.path '%s': every evaluation sample is of one class ('%s'); an "
                    "accuracy against a single label says nothing about a classifier",
                    cfg.path, only)
    return Dataset([{name: decoded[i]} for i in cal_idx], [{name: decoded[i]} for i in ev_idx],
                   labels)
