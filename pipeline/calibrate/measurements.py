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


def read_measurements(path: Path, zoo: list[str]) -> list[Measurement]:
    """Parse and check every row; the first bad one is one line naming file and row."""
    if not path.is_file():
        raise UserError(f"measurements: no such file '{path}'")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise UserError(f"{path}: missing column(s) {', '.join(missing)} "
                            f"(expected: {', '.join(COLUMNS)})")
        rows = [_parse(path, i + 2, raw, zoo) for i, raw in enumerate(reader)]
    if not rows:
        raise UserError(f"{path}: no measurement rows")
    return rows


def _parse(path: Path, row: int, raw: dict[str, str], zoo: list[str]) -> Measurement:
    where = f"{path} row {row}"
    model = (raw.get("model") or "").strip()
    if not model:
        raise UserError(f"{where}: empty model")
    if model not in zoo and not (model.endswith(".onnx") and Path(model).is_file()):
        raise UserError(f"{where}: model '{model}' is neither a model config "
                        f"({', '.join(zoo)}) nor an existing .onnx file")
    try:
        latency = float(raw.get("latency_ms") or "nan")
    except ValueError:
        raise UserError(f"{where}: latency_ms '{raw.get('latency_ms')}' is not a number"
                        ) from None
    if not (math.isfinite(latency) and latency > 0):
        raise UserError(f"{where}: latency_ms must be a positive time, got {latency}")
    overrides = tuple(shlex.split(raw.get("overrides") or ""))
    for o in overrides:
        if "=" not in o or o.partition("=")[0].lstrip("+~") in ("hardware", "model"):
            raise UserError(f"{where}: override '{o}' must be key=value and may not pick "
                            "another hardware profile or model (the model column does)")
    return Measurement(row, model, overrides, latency)
