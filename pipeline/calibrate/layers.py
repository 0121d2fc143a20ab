"""Per-layer times from the vendor's profiler: the optional second file of a calibration.

A whole-network time says how much the model is off; per-layer times say where, which is
what separates a dispatch cost (every small layer is slow) from a DRAM rate (the big ones
are). The file is a CSV, one row per measured layer:

    model,overrides,layer,time_us
    yolov5s,hardware.cores=1,/model.0/conv/Conv,412

``model`` and ``overrides`` name the measurements row it belongs to (same spelling);
``layer`` is the ONNX node name, or the vendor's full name ``OpType:node`` as RKNN-Toolkit2's
``eval_perf`` prints it in its FullName column. ``python -m pipeline.calibrate.layers
DUMP.txt MODEL [OVERRIDES]`` turns that table (the "Network Layer Information Table") into
these rows.

A vendor fuses layers as npuflow's compiler does, not always the same way: times of layers
that land in one npuflow kernel are summed, a kernel no measured layer maps to is left out,
and a measured layer whose node npuflow's optimizer removed (a folded BatchNorm) is
reported, not fitted.
"""

from __future__ import annotations

import csv
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.calibrate.measurements import Measurement, csv_rows, positive_time
from pipeline.errors import UserError

COLUMNS = ("model", "overrides", "layer", "time_us")
_FULL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*:(.+)$")  # RKNN's "Conv:/model.0/conv/Conv"


@dataclass(frozen=True)
class LayerTime:
    line: int  # 1-based line of the file (header is line 1)
    node: str
    time_us: float


def node_name(layer: str) -> str:
    """The ONNX node a profiler's layer name refers to."""
    match = _FULL_NAME.match(layer)
    return match.group(1) if match else layer


def read_layers(path: Path, rows: list[Measurement]) -> dict[int, list[LayerTime]]:
    """Layer times per measurements row index; the first bad line is one line naming it."""
    index = {(m.model, m.overrides): i for i, m in enumerate(rows)}
    out: dict[int, list[LayerTime]] = {}
    for line, raw in enumerate(csv_rows(path, COLUMNS, "layers"), start=2):
        where = f"{path} line {line}"
        key = ((raw.get("model") or "").strip(), tuple(shlex.split(raw.get("overrides") or "")))
        if key not in index:
            raise UserError(f"{where}: no measurements row has model '{key[0]}' with "
                            f"overrides '{' '.join(key[1])}'")
        layer = (raw.get("layer") or "").strip()
        if not layer:
            raise UserError(f"{where}: empty layer name")
        time_us = positive_time(raw, "time_us", where)
        out.setdefault(index[key], []).append(LayerTime(line, node_name(layer), time_us))
    if not out:
        raise UserError(f"{path}: no layer rows")
    return out


def kernel_times(layers: list[LayerTime], kernels: list[dict]) -> tuple[dict[str, float],
                                                                          list[str]]:
    """Measured µs per npuflow kernel (the sum of its measured layers), and the measured
    nodes no kernel holds."""
    owner = {op: k["name"] for k in kernels for op in k["ops"]}
    measured: dict[str, float] = {}
    unmatched = []
    for layer in layers:
        kernel = owner.get(layer.node)
        if kernel is None:
            unmatched.append(layer.node)
            continue
        measured[kernel] = measured.get(kernel, 0.0) + layer.time_us
    return measured, unmatched


def parse_rknn_table(text: str) -> list[tuple[str, float]]:
    """(FullName, Time(us)) of each row of RKNN-Toolkit2's layer table: the header row
    names the columns, a data row has one token per column (shapes carry no spaces)."""
    rows: list[tuple[str, float]] = []
    header: list[str] | None = None
    for raw in text.splitlines():
        line = re.sub(r"^.*?RKNN: \[[^\]]*\]\s*|^\s*\|\s*", "", raw).strip()
        tokens = line.split()
        if "Time(us)" in tokens and "FullName" in tokens:
            header = tokens
            continue
        if header and len(tokens) == len(header) and tokens[0].isdigit():
            time = tokens[header.index("Time(us)")]
            name = tokens[header.index("FullName")]
            if re.fullmatch(r"[0-9.]+", time) and ":" in name:
                rows.append((name, float(time)))
    return rows


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print("usage: python -m pipeline.calibrate.layers RKNN_PERF_DUMP.txt MODEL "
              "['OVERRIDES']  > layers.csv", file=sys.stderr)
        sys.exit(2)
    dump, model, overrides = Path(args[0]), args[1], args[2] if len(args) == 3 else ""
    if not dump.is_file():
        print(f"layers: no such file '{dump}'", file=sys.stderr)
        sys.exit(2)
    rows = parse_rknn_table(dump.read_text(errors="replace"))
    if not rows:
        print(f"{dump}: no RKNN layer table found (a header with Time(us) and FullName)",
              file=sys.stderr)
        sys.exit(2)
    writer = csv.writer(sys.stdout)
    writer.writerow(COLUMNS)
    for name, time_us in rows:
        writer.writerow([model, overrides, name, f"{time_us:g}"])


if __name__ == "__main__":
    main()
