"""Calibration and evaluation data for the quantize stage (the ``data`` config group).

One :func:`preprocess_image` serves calibration and evaluation alike: the seeds' first
cause of int8 accuracy loss is calibration data preprocessed differently from inference
data (mean/std, RGB/BGR, layout). Splits are seeded and disjoint. Every sample is checked
against the model input (shape, finite values) before use, with errors naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from pipeline.datasets import digits
from pipeline.errors import UserError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


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


def preprocess_image(path: Path, cfg: DictConfig, shape: tuple[int, ...]) -> np.ndarray:
    """Decode, resize the short side, centre-crop, scale, normalise, order channels, lay out."""
    from PIL import Image

    try:
        img = Image.open(path).convert("RGB")
    except OSError as exc:
        raise UserError(f"data.path: cannot decode image '{path}': {exc}") from exc
    nchw = cfg.layout == "NCHW"
    height, width = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
    short = cfg.resize or min(height, width)
    w, h = img.size
    ratio = short / min(w, h)
    img = img.resize((max(1, round(w * ratio)), max(1, round(h * ratio))), Image.BILINEAR)
    w, h = img.size
    left, top = (w - width) // 2, (h - height) // 2
    img = img.crop((left, top, left + width, top + height))
    x = np.asarray(img, dtype=np.float32) * np.float32(cfg.scale)
    x = (x - np.asarray(cfg.mean, np.float32)) / np.asarray(cfg.std, np.float32)
    if cfg.channel_order == "BGR":
        x = x[..., ::-1]
    if nchw:
        x = x.transpose(2, 0, 1)
    return np.ascontiguousarray(x[None], dtype=np.float32)


def _check(sample: np.ndarray, shape: tuple[int, ...], where: str) -> np.ndarray:
    if tuple(sample.shape) != tuple(shape):
        raise UserError(f"{where}: shape {list(sample.shape)} does not match the model input "
                        f"{list(shape)}")
    if not np.all(np.isfinite(sample)):
        raise UserError(f"{where}: contains NaN or infinite values")
    return sample.astype(np.float32)


def _split(samples: list, cfg: DictConfig, where: str) -> tuple[list, list]:
    if not samples:
        raise UserError(f"{where}: no samples found")
    order = np.random.default_rng(cfg.seed).permutation(len(samples))
    n_cal = min(cfg.calibration_size, len(samples))
    cal = [samples[i] for i in order[:n_cal]]
    rest = [samples[i] for i in order[n_cal:]] or cal
    return cal, rest[: cfg.eval_size]


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
    folder = Path(cfg.path or "")
    if not cfg.path or not folder.is_dir():
        raise UserError(f"data.path: '{cfg.path}' is not a folder (data={kind} needs one)")
    if kind == "images":
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        samples = [_check(preprocess_image(p, cfg, shape), shape, str(p)) for p in files]
    elif kind == "npy":
        files = sorted(folder.glob("*.npy"))
        samples = []
        for p in files:
            arr = np.load(p)
            arr = arr[None] if arr.ndim == len(shape) - 1 else arr
            samples.append(_check(arr, shape, str(p)))
    else:
        raise UserError(f"data.kind: must be synthetic, digits, images or npy, got '{kind}'")
    cal, ev = _split(samples, cfg, f"data.path '{folder}'")
    return Dataset([{name: s} for s in cal], [{name: s} for s in ev], None)
