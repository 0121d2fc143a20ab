"""Calibrate rk3588 on the published RK3588 figures, each network held out once.

    python benchmarks/calibrate_rk3588.py

The measurements are rknn_model_zoo v2.3.2's single-core table (the rows of
benchmarks/silicon/published.yaml with source rknn_zoo, PP-OCRv4's files included): one
board, one SDK, one table, as a user's own measurements would be. ``npuflow-calibrate``
fits the parameters rk3588.yaml lists under ``calibrate:`` and reports, per network, the
ratio before calibration, after (fitted on all rows) and leave-one-out (fitted on the
others). The calibrated profile is
written to a temporary config dir and copied into results/ for the record; conf/hardware
is not touched.
"""

from __future__ import annotations

import csv
import shutil
import tempfile
from pathlib import Path

from _common import HERE, REPO, RESULTS, write_result
from omegaconf import OmegaConf

from pipeline.calibrate.cli import run
from pipeline.onnx_io import resolve_path

FAST = ["data.calibration_size=4", "data.eval_size=4", "quant.analysis.layers=false"]


def measurements(path: Path) -> int:
    data = OmegaConf.to_container(OmegaConf.load(HERE / "silicon" / "published.yaml"))
    assert isinstance(data, dict)
    rows = []
    for pair in data["pairs"]:
        if pair["source"] != "rknn_zoo":
            continue
        extra = [o for o in pair["overrides"]
                 if not o.startswith(("model=", "model.path=", "hardware="))]
        model = next(o.split("=", 1)[1] for o in pair["overrides"] if o.startswith("model="))
        if model == "onnx":  # a user's file: the CSV names the file itself
            model = str(resolve_path(next(o.split("=", 1)[1] for o in pair["overrides"]
                                          if o.startswith("model.path="))))
        rows.append({"model": model, "overrides": " ".join(extra),
                     "latency_ms": pair["latency_ms"]})
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["model", "overrides", "latency_ms"])
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def fit(out: Path) -> tuple[int, str]:
    """One calibration on the table's rows; its report's body."""
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "rk3588_rknn_zoo.csv"
        n = measurements(csv_path)
        profile = run(["hardware=rk3588", f"measurements={csv_path}", "--config-dir", tmp,
                       "--report-dir", str(out), *FAST])
        shutil.copy(profile, out / profile.name)
        shutil.copy(csv_path, out / csv_path.name)
    return n, (out / "report.md").read_text().split("\n", 2)[2]


def main() -> None:
    out = RESULTS / "calibrate_rk3588"
    n, report = fit(out)
    write_result("calibrate_rk3588", (
        f"rk3588 calibrated on the {n} single-core rows of rknn_model_zoo v2.3.2 "
        "(benchmarks/silicon/published.yaml, source rknn_zoo), int8 (PP-OCRv4 rec fp16, as "
        "published). Measurements, calibrated profile and plot: "
        f"`{out.relative_to(REPO)}/`.\n\n" + report))


if __name__ == "__main__":
    main()
