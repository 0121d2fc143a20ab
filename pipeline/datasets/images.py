"""One image preprocessing for calibration and evaluation (the ``data`` config group).

The seeds' first cause of int8 accuracy loss is calibration data preprocessed differently
from inference data (mean/std, RGB/BGR, layout, resize), so every image-based data kind
goes through :func:`preprocess_image`. Resize modes, as the tools users come from do it:

- ``crop``: resize the short side to ``data.resize`` (default: the input's short side),
  centre-crop to the input (torchvision's ``Resize`` + ``CenterCrop``, ImageNet models);
- ``stretch``: resize to the input's height and width, aspect ratio lost (YOLO letterbox
  off, most detection exporters' simplest mode);
- ``pad``: keep the aspect ratio to the input's height, cap the width at the input's, pad
  right (and bottom) with ``data.pad_value``: PaddleOCR's ``resize_norm_img`` for text
  lines (``ppocr/data/imaug/rec_img_aug.py``). ``pad_value`` is in the model's input space
  (after scale / mean / std): PaddleOCR pads its normalised lines with 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from pipeline.errors import UserError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


def _resized(img, mode: str, height: int, width: int, short: int | None):
    """The image resized by ``mode``, and the (width, height) it occupies in the input."""
    from PIL import Image

    w, h = img.size
    if mode == "stretch":
        return img.resize((width, height), Image.BILINEAR)
    if mode == "pad":
        new_w = min(width, max(1, math.ceil(height * w / h)))
        return img.resize((new_w, height), Image.BILINEAR)
    ratio = (short or min(height, width)) / min(w, h)
    img = img.resize((max(1, round(w * ratio)), max(1, round(h * ratio))), Image.BILINEAR)
    w, h = img.size
    left, top = (w - width) // 2, (h - height) // 2
    return img.crop((left, top, left + width, top + height))


def preprocess_image(path: Path, cfg: DictConfig, shape: tuple[int, ...]) -> np.ndarray:
    """Decode, resize (``data.resize_mode``), scale, normalise, order channels, lay out."""
    from PIL import Image

    try:
        img = Image.open(path).convert("RGB")
    except OSError as exc:
        raise UserError(f"data.path: cannot decode image '{path}': {exc}") from exc
    nchw = cfg.layout == "NCHW"
    height, width = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
    img = _resized(img, cfg.resize_mode, height, width, cfg.resize)
    x = np.asarray(img, dtype=np.float32) * np.float32(cfg.scale)
    x = (x - np.asarray(cfg.mean, np.float32)) / np.asarray(cfg.std, np.float32)
    if cfg.channel_order == "BGR":
        x = x[..., ::-1]
    canvas = np.full((height, width, 3), np.float32(cfg.pad_value), np.float32)
    canvas[: x.shape[0], : x.shape[1]] = x
    if nchw:
        canvas = canvas.transpose(2, 0, 1)
    return np.ascontiguousarray(canvas[None], dtype=np.float32)
