"""Labelled image data as users keep it, listed (not decoded) so that a wrong folder or CSV
stops at the door, before any stage runs.

- ``image_folder``: one sub-folder per class; the sorted sub-folder names are the label
  indices, as torchvision's ``ImageFolder`` numbers them.
- ``image_list``: a CSV of ``path,label`` (an optional header row ``path,label``); paths are
  relative to the CSV's folder; a label may be any string (a class name, an index, a text
  line for a recogniser). With ``data.classes`` the labels are class names mapped to
  indices in that order; without it, labels that are all integers are indices and any
  other labels stay text for the metric (e.g. CTC line accuracy).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from pipeline.datasets.images import IMAGE_SUFFIXES
from pipeline.errors import UserError


@dataclass(frozen=True)
class Listing:
    files: list[Path]
    labels: np.ndarray  # int64 class indices, or an object array of label strings
    classes: list[str]  # names of the class indices (empty for text labels)


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower()
                  in IMAGE_SUFFIXES)


def _source(path: str | None, kind: str, is_folder: bool) -> Path:
    """``data.path`` given and of the right kind (folder or file), else one line."""
    need = ("a folder with one sub-folder of images per class" if is_folder
            else "a CSV file of path,label")
    if not path:
        raise UserError(f"data.path: missing (data={kind} needs {need})")
    found = Path(path)
    if not (found.is_dir() if is_folder else found.is_file()):
        raise UserError(f"data.path: '{path}' is not {need} (data={kind})")
    return found


def image_folder(path: str | None) -> Listing:
    folder = _source(path, "image_folder", True)
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not classes:
        raise UserError(f"data.path '{folder}': no class sub-folders (one per class, "
                        "as torchvision's ImageFolder)")
    files: list[Path] = []
    labels: list[int] = []
    for index, name in enumerate(classes):
        found = _images(folder / name)
        if not found:
            raise UserError(f"data.path '{folder}': class folder '{name}' has no images "
                            f"({', '.join(IMAGE_SUFFIXES)})")
        files += found
        labels += [index] * len(found)
    return Listing(files, np.asarray(labels, np.int64), classes)


def _rows(csv_path: Path) -> list[tuple[int, list[str]]]:
    with open(csv_path, newline="", encoding="utf-8-sig") as handle:  # a spreadsheet's BOM
        rows = [(n, row) for n, row in enumerate(csv.reader(handle), start=1) if row]
    if rows and [c.strip().lower() for c in rows[0][1]] == ["path", "label"]:
        rows = rows[1:]
    return rows


def image_list(path: str | None, classes: list[str] | None) -> Listing:
    csv_path = _source(path, "image_list", False)
    try:
        rows = _rows(csv_path)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"data.path '{csv_path}': not a UTF-8 CSV ({exc})") from exc
    if not rows:
        raise UserError(f"data.path '{csv_path}': no rows (expected path,label)")
    files, texts = [], []
    for line, row in rows:
        if len(row) != 2:
            raise UserError(f"data.path '{csv_path}' line {line}: expected 2 columns "
                            f"path,label, got {len(row)}")
        file = csv_path.parent / row[0].strip()
        if not file.is_file():
            raise UserError(f"data.path '{csv_path}' line {line}: no such file '{row[0]}'")
        files.append(file)
        texts.append(row[1])
    if classes:
        index = {name: i for i, name in enumerate(classes)}
        unknown = next((t for t in texts if t not in index), None)
        if unknown is not None:
            raise UserError(f"data.path '{csv_path}': label '{unknown}' is not one of "
                            f"data.classes ({', '.join(classes)})")
        return Listing(files, np.asarray([index[t] for t in texts], np.int64), list(classes))
    if all(t.strip().lstrip("-").isdigit() for t in texts):
        return Listing(files, np.asarray([int(t) for t in texts], np.int64), [])
    return Listing(files, np.asarray(texts, dtype=object), [])


def listing(cfg: DictConfig) -> Listing | None:
    """The labelled files of ``cfg`` (None for unlabelled kinds); raises on a bad source."""
    if cfg.kind == "image_folder":
        return image_folder(cfg.path)
    if cfg.kind == "image_list":
        return image_list(cfg.path, list(cfg.classes) if cfg.classes else None)
    return None
