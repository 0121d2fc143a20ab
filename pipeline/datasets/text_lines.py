"""Labelled text-line images rendered offline: data for OCR networks with no download.

Words come from the Zen of Python (``this``, in every Python), fonts from the DejaVu family
that matplotlib ships; size, font, ink, background, margins and the words are drawn from a
seeded generator, so the same seed writes the same files. Two layouts:

- ``cls``: a direction classifier's ``image_folder`` with sub-folders ``0`` and ``180``
  (upright and upside-down lines; sorted names = PaddleOCR's ``label_list`` order);
- ``rec``: a recogniser's ``image_list`` (``labels.csv``: path,text) of upright lines.

    python -m pipeline.datasets.text_lines cls OUT_DIR --count 300 --seed 0
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import csv
import io
import re
from pathlib import Path

import numpy as np

MAX_WORDS = {"cls": 4, "rec": 3}


def vocabulary() -> list[str]:
    with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the Zen
        import this
    text = codecs.decode(this.s, "rot13")
    return sorted({w for w in re.findall(r"[A-Za-z]+", text) if len(w) > 1})


def _fonts() -> list[Path]:
    import matplotlib

    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    return sorted(p for p in folder.glob("DejaVu*.ttf") if "Display" not in p.name)


def render(text: str, rng: np.random.Generator, fonts: list[Path]):
    """One line of dark text on a light background, tight margins as a detector crops it."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(str(fonts[rng.integers(len(fonts))]), int(rng.integers(22, 40)))
    left, top, right, bottom = font.getbbox(text)
    margin = int(rng.integers(2, 8))
    size = (right - left + 2 * margin, bottom - top + 2 * margin)
    paper = tuple(int(v) for v in rng.integers(200, 256, 3))
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    img = Image.new("RGB", size, paper)
    ImageDraw.Draw(img).text((margin - left, margin - top), text, font=font, fill=ink)
    return img


def _line(rng: np.random.Generator, words: list[str], task: str) -> str:
    count = int(rng.integers(1, MAX_WORDS[task] + 1))
    parts = [words[i] for i in rng.integers(len(words), size=count)]
    if rng.random() < 0.3:
        parts[int(rng.integers(count))] = str(int(rng.integers(0, 10_000)))
    return " ".join(parts)


def write(task: str, out: Path, count: int, seed: int = 0) -> Path:
    """Write ``count`` lines; returns the ``data.path`` to give npuflow."""
    rng = np.random.default_rng(seed)
    words, fonts = vocabulary(), _fonts()
    rows = []
    for i in range(count):
        text = _line(rng, words, task)
        img = render(text, rng, fonts)
        if task == "cls":
            angle = "180" if rng.random() < 0.5 else "0"
            path = out / angle / f"line_{i:05d}.png"
            img = img.rotate(180) if angle == "180" else img
        else:
            path = out / "images" / f"line_{i:05d}.png"
            rows.append((path.relative_to(out).as_posix(), text))
        path.parent.mkdir(parents=True, exist_ok=True)
        img.save(path)
    if task == "cls":
        return out
    with open(out / "labels.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label"])
        writer.writerows(rows)
    return out / "labels.csv"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=sorted(MAX_WORDS))
    parser.add_argument("out", type=Path)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write(args.task, args.out, args.count, args.seed))


if __name__ == "__main__":
    main()
