"""The time of one transcendental evaluation on a Rockchip host's fallback path
(``host.transcendental_ns``), read off the boards.

    python benchmarks/host_rates.py

RKNN-Toolkit2's rk3568 builds run every Softmax on the CPU (``exSoftmax13``: YOLO11's and
YOLOv10's attention, 2-4 x 400 x 400 elements). npuflow's host prices arithmetic at its
sustained GFLOP/s, as a vectorised polynomial exp would run; the boards take far longer
(YOLO11n is 13 ms slower on the RK3566/68 than npuflow without the key). The runtime's
fallback kernel converts each element from the NPU's layout and precision, evaluates it
and converts it back; that time per evaluation is what this script reads.

For each pair ``silicon/published.yaml`` marks ``role: fit`` with the key in ``fit_for``,
npuflow runs twice, at 0 and at 1 ns per evaluation. Host kernels lie on the critical
path, so the difference is the network's evaluations on the host (ms per ns), and the
board's time beyond the first run is what the evaluations would have to cost; least
squares through the origin over the pairs gives the key (per chip). Every other pair with
host transcendentals (YOLOv10 on the RK3566/68, among others) checks it. Writes
results/host_rates.{md,json}.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml
from _common import run_npuflow, write_result
from silicon_agreement import PUBLISHED, chip, overrides

KEY = "host.transcendental_ns"


def fit_pairs() -> list[dict]:
    """The pairs published.yaml says this key is fitted on."""
    pairs = yaml.safe_load(PUBLISHED.read_text())["pairs"]
    return [p for p in pairs if p.get("role") == "fit" and KEY in p.get("fit_for", [])]


def slope_and_rest(pair: dict, tmp: Path) -> dict:
    """npuflow's latency without the key and its growth per ns of it, for one pair."""
    at = {ns: run_npuflow(tmp / f"{pair['network']}_{ns}", *overrides(pair),
                          f"hardware.{KEY}={ns}")["latency_ms"] for ns in (0.0, 1.0)}
    return {"network": pair["network"], "chip": chip(pair), "board_ms": pair["latency_ms"],
            "npuflow_ms_at_0": at[0.0], "ms_per_ns": at[1.0] - at[0.0],
            "rest_ms": pair["latency_ms"] - at[0.0]}


def fit(rows: list[dict]) -> dict[str, float]:
    """Per chip: ns per evaluation, least squares through the origin."""
    out = {}
    for name in sorted({r["chip"] for r in rows}):
        group = [r for r in rows if r["chip"] == name]
        den = sum(r["ms_per_ns"] ** 2 for r in group)
        if den > 0:
            out[name] = sum(r["ms_per_ns"] * r["rest_ms"] for r in group) / den
    return out


def markdown(rows: list[dict], fitted: dict[str, float]) -> str:
    lines = ["| network | chip | board ms | npuflow at 0 ns | ms per ns | board - npuflow ms "
             "| at the fit |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ns = fitted.get(r["chip"], 0.0)
        lines.append(f"| {r['network']} | {r['chip']} | {r['board_ms']:.2f} | "
                     f"{r['npuflow_ms_at_0']:.2f} | {r['ms_per_ns']:.3f} | {r['rest_ms']:.2f} | "
                     f"{r['npuflow_ms_at_0'] + ns * r['ms_per_ns']:.2f} |")
    lines += ["", *(f"- **{name}**: `{KEY}` = {ns:.1f} ns per evaluation"
                    for name, ns in fitted.items())]
    return "\n".join(lines)


def main() -> None:
    pairs = fit_pairs()
    if not pairs:
        sys.exit(f"no pair in {PUBLISHED} is fit for {KEY}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [slope_and_rest(p, Path(tmp)) for p in pairs]
    fitted = fit(rows)
    text = markdown(rows, fitted)
    write_result("host_rates", text, {"rows": rows, "fitted": fitted})
    print(text)


if __name__ == "__main__":
    main()
