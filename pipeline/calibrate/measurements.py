"""The measurements file: one row per (model, overrides, measured latency)."""

from __future__ import annotations

import csv
import math
import shlex
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import UserError

COLUMNS = ("model", "overrides", "latency_ms")


@dataclass(frozen=True)
class Measurement:
    row: int  # 1-based data row, as a spreadsheet shows it (header is row 1)
    model: str  # a zoo name or an ONNX path
    overrides: tuple[str, ...]
    latency_ms: float

    @property
    def label(self) -> str:
        extra = " ".join(self.overrides)
        return f"{Path(self.model).stem} {extra}".strip()

    def model_overrides(self) -> list[str]:
        """The Hydra overrides that select this row's model."""
        if self.model.endswith(".onnx"):
            return ["model=onnx", f"model.path={Path(self.model).resolve()}"]
        return [f"model={self.model}"]


def csv_rows(path: Path, columns: tuple[str, ...], what: str) -> list[dict[str, str]]:
    """A CSV file's rows, once its header has every column (else one line naming them)."""
    if not path.is_file():
        raise UserError(f"{what}: no such file '{path}'")
    # utf-8-sig: a spreadsheet's "CSV UTF-8" starts with a byte-order mark, which would
    # otherwise be part of the first column's name
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            reader.fieldnames = [f.strip() for f in reader.fieldnames or []]
            missing = [c for c in columns if c not in reader.fieldnames]
            if missing:
                raise UserError(f"{path}: missing column(s) {', '.join(missing)} "
                                f"(expected: {', '.join(columns)}; found: "
                                f"{', '.join(reader.fieldnames) or 'no header'})")
            return list(reader)
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); save it as CSV UTF-8"
                        ) from exc
    except csv.Error as exc:
        raise UserError(f"{path}: not a CSV file ({exc})") from exc


def read_measurements(path: Path, zoo: list[str]) -> list[Measurement]:
    """Parse and check every row; the first bad one is one line naming file and row."""
    rows = [_parse(path, i + 2, raw, zoo)
            for i, raw in enumerate(csv_rows(path, COLUMNS, "measurements"))]
    if not rows:
        raise UserError(f"{path}: no measurement rows")
    return rows


def positive_time(raw: dict[str, str], column: str, where: str) -> float:
    """A measured time: a finite number > 0, else one line naming the row and column."""
    try:
        value = float(raw.get(column) or "nan")
    except ValueError:
        raise UserError(f"{where}: {column} '{raw.get(column)}' is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{where}: {column} must be a positive time, got {value}")
    return value


def _parse(path: Path, row: int, raw: dict[str, str], zoo: list[str]) -> Measurement:
    where = f"{path} row {row}"
    model = (raw.get("model") or "").strip()
    if not model:
        raise UserError(f"{where}: empty model")
    if model not in zoo and not (model.endswith(".onnx") and Path(model).is_file()):
        raise UserError(f"{where}: model '{model}' is neither a model config "
                        f"({', '.join(zoo)}) nor an existing .onnx file")
    latency = positive_time(raw, "latency_ms", where)
    overrides = tuple(shlex.split(raw.get("overrides") or ""))
    for o in overrides:
        if "=" not in o or o.partition("=")[0].lstrip("+~") in ("hardware", "model"):
            raise UserError(f"{where}: override '{o}' must be key=value and may not pick "
                            "another hardware profile or model (the model column does)")
    return Measurement(row, model, overrides, latency)
