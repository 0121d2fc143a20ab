"""The rate a language model's decode step streams its weights at on a Rockchip board
(``dram.stream_gbps``), read off the fit rows.

    python benchmarks/stream_rates.py

A decode step is one matrix-vector product per weight matrix: every weight passes through
the NPU once, in address order. The profiles' ``dram.bandwidth_gbps`` is RKNN-Toolkit2's
DDR rate, the one its estimate charges a convolution's tiles (short strided bursts); the
boards decode faster than that rate allows (rknn-llm's benchmark.md: a 6B model at 5.0
tokens/s on the RK3588 reads ~30 GB/s, where RKNN charges 23.6; on the RK3576 2.5 tokens/s,
~15 GB/s, where the profile has 8.4). ``dram.stream_gbps`` is the rate of such a stream.

For each ``llm_pairs`` row of ``silicon/published.yaml`` marked ``role: fit`` with the key
in ``fit_for``, npuflow runs at two stream rates, ``s1`` (the profile's tile rate) and
``s2 = 2 x s1``. A step's time is ``a + b / s`` while the weights bind, so the two runs
give each row's ``a`` and ``b``; least squares of the board's ms per token on ``b / s``
over a chip's rows gives ``1 / s``. Each row then runs once more at the fitted rate, and
that run, not the line, is what the table reports. Check rows test it
(``llm_agreement.py``). Writes results/stream_rates.{md,json}.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from _common import REPO, write_result
from llm_agreement import FAST, PUBLISHED, _in_repo, load_pairs

sys.path.insert(0, str(REPO))
from hardware.profile import load_profile
from pipeline import api

KEY = "dram.stream_gbps"


def fit_rows() -> list[dict]:
    """The language-model rows published.yaml says this key is fitted on."""
    return [p for p in load_pairs([]) if p["role"] == "fit" and KEY in p.get("fit_for", [])]


def ms_per_token(pair: dict, gbps: float, tmp: Path) -> float:
    """npuflow's mean decode step at this stream rate, in ms."""
    run_dir = tmp / "run"
    metrics = api.run(*(_in_repo(o) for o in pair["overrides"]), *FAST,
                      f"hardware.{KEY}={gbps}", f"run.cache_dir={tmp / 'cache'}",
                      run_dir=run_dir).metrics
    shutil.rmtree(run_dir)  # a 6B model's folder is gigabytes; the cache keeps the stages
    return metrics["decode_ms_per_token"]


def line(pair: dict, tmp: Path) -> dict:
    """One row's step time at two rates: its ``a + b / s`` and the board's ms per token."""
    s1 = load_profile(REPO / "conf" / "hardware" / f"{pair['profile']}.yaml").dram.bandwidth_gbps
    s2 = 2 * s1
    t1, t2 = ms_per_token(pair, s1, tmp), ms_per_token(pair, s2, tmp)
    b = (t1 - t2) / (1 / s1 - 1 / s2)
    return {"network": pair["network"], "chip": pair["profile"], "dtype": pair["dtype"],
            "board_ms": 1e3 / pair["tokens_per_s"], "s1_gbps": s1, "ms_at_s1": t1,
            "ms_at_s2": t2, "a_ms": t1 - b / s1, "b_ms_gbps": b}


def fit(rows: list[dict]) -> dict[str, float]:
    """Per chip: the stream rate in GB/s, least squares of board - a on b / s."""
    out = {}
    for chip in sorted({r["chip"] for r in rows}):
        group = [r for r in rows if r["chip"] == chip]
        den = sum(r["b_ms_gbps"] ** 2 for r in group)
        inverse = sum(r["b_ms_gbps"] * (r["board_ms"] - r["a_ms"]) for r in group) / den
        if inverse > 0:
            out[chip] = round(1 / inverse, 1)
    return out


def markdown(rows: list[dict], fitted: dict[str, float]) -> str:
    lines = ["| model | chip | dtype | board ms/token | npuflow at the tile rate (GB/s) | "
             "at twice it | at the fit |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        at = r.get("ms_at_fit")
        lines.append(f"| {r['network']} | {r['chip']} | {r['dtype']} | {r['board_ms']:.1f} | "
                     f"{r['ms_at_s1']:.1f} ({r['s1_gbps']:g}) | {r['ms_at_s2']:.1f} | "
                     + (f"{at:.1f} ({at / r['board_ms']:.2f}x) |" if at else "- |"))
    lines += ["", *(f"- **{chip}**: `{KEY}` = {gbps:g} GB/s" for chip, gbps in fitted.items())]
    return "\n".join(lines)


def main() -> None:
    pairs = fit_rows()
    if not pairs:
        sys.exit(f"no llm_pairs row in {PUBLISHED} is fit for {KEY}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for pair in pairs:
            rows.append(line(pair, Path(tmp)))
            print(rows[-1], flush=True)
        fitted = fit(rows)
        for pair, row in zip(pairs, rows, strict=True):
            if row["chip"] in fitted:
                row["ms_at_fit"] = ms_per_token(pair, fitted[row["chip"]], Path(tmp))
    text = markdown(rows, fitted)
    write_result("stream_rates", text, {"rows": rows, "fitted": fitted})
    print(text)


if __name__ == "__main__":
    main()
