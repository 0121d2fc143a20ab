"""The Rockchip profiles' two elementwise rates, read off the boards.

RKNN-Toolkit2's compile-time estimate costs a convolution with a fused SiLU / Sigmoid /
HardSwish (ConvExSwish, ConvSigmoid, ConvHardSwish) as the plain convolution and leaves
standalone elementwise layers (Add, Mul, Sigmoid, ...) at 0 cycles; the boards pay for
both. Per network, the board's time beyond RKNN's DDR + NPU cycles and beyond the DMA
time npuflow's vector passes expose (on these load-then-compute chips a vector pass's
operands load, then it computes: ``npuflow_vector_dma_ms``, from npuflow's own plan of the
same network, independent of the rates) is regressed (least squares, no intercept) on the
outputs of those two kinds of layer:

    board - RKNN's DDR + NPU - vector DMA  ~=  lut_elements / lut_rate
                                               + elementwise_bytes / vector_rate

over the networks made of convolutions, SiLU / HardSwish and elementwise layers (the pairs
``benchmarks/silicon/published.yaml`` marks ``role: fit`` for these two keys; the others add
attention or CPU layers the two rates do not describe). The rates become
``epilogue.lut_elements_per_cycle`` and ``vector_unit.output_bytes_per_cycle``; every
other rknn_model_zoo pair checks them.
"""

from __future__ import annotations

import re

import numpy as np
import yaml
from _common import HERE

PUBLISHED = HERE / "silicon" / "published.yaml"

RATES = ("epilogue.lut_elements_per_cycle", "vector_unit.output_bytes_per_cycle")


def fit_set() -> set[tuple[str, str]]:
    """(network, chip) of the pairs ``published.yaml`` says these rates are fitted on
    (``role: fit`` with both keys in ``fit_for``): the regression's rows come from there."""
    data = yaml.safe_load(PUBLISHED.read_text())
    out = set()
    for pair in data["pairs"]:
        if pair.get("role") == "fit" and set(RATES) <= set(pair.get("fit_for", [])):
            chip = next(o.split("=")[1] for o in pair["overrides"] if o.startswith("hardware="))
            out.add((pair["network"].split()[0], chip))
    return out
LUT_SUFFIXES = ("ExSwish", "Swish", "Sigmoid", "HardSwish", "HardSigmoid")
ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Sigmoid", "HardSwish", "HardSigmoid", "Clip",
               "Relu", "LeakyRelu", "PRelu", "Tanh", "Max", "Min", "exSwish", "Swish"}
WIDTH = {"int8": 1, "fp16": 2}


def _output_elems(shapes: str) -> int:
    found = re.findall(r"\(([\d,]+)\)", shapes)
    return int(np.prod([int(v) for v in found[-1].split(",")])) if found else 0


def layer_outputs(rows: list[dict], precision: str) -> dict[str, int]:
    """Output elements of RKNN's LUT-activated convolutions, and output bytes (at the
    network's precision) of its standalone elementwise NPU layers (left at 0 cycles)."""
    lut = elementwise = 0
    for r in rows:
        if r["target"] != "NPU":
            continue
        out = _output_elems(r["shapes"])
        if r["total"] > 0 and r["op"].startswith("Conv") and r["op"].endswith(LUT_SUFFIXES):
            lut += out
        elif r["total"] == 0 and r["op"] in ELEMENTWISE:
            elementwise += out * WIDTH[precision]
    return {"lut_elements": lut, "elementwise_bytes": elementwise}


def fit_rates(results: list[dict]) -> dict[str, dict]:
    """Per chip: the two rates (per NPU cycle; at 1 GHz 1e6 per ms) and each FIT network's
    board rest against the fit's prediction."""
    fits = {}
    for target in sorted({r["target"] for r in results}):
        fit = fit_set()
        rows = [r for r in results
                if r["target"] == target and (r["network"].split()[0], target) in fit]
        if len(rows) < 2:
            continue
        a = np.array([[r["lut_elements"] / 1e6, r["elementwise_bytes"] / 1e6] for r in rows])
        rest = np.array([r["board_ms"] - r["rknn_ddr_plus_npu_ms"] - r["npuflow_vector_dma_ms"]
                         for r in rows])
        ms_per_mb, *_ = np.linalg.lstsq(a, rest, rcond=None)
        fits[target] = {"lut_rate": 1 / ms_per_mb[0], "vector_rate": 1 / ms_per_mb[1],
                        "rows": [(r["network"].split()[0], float(x), float(p))
                                 for r, x, p in zip(rows, rest, a @ ms_per_mb, strict=True)]}
    return fits


def markdown(results: list[dict]) -> str:
    fitted = sorted({n for n, _ in fit_set()})
    lines = ["Elementwise rates read off the boards (`benchmarks/rknn_rates.py`): board - "
             "RKNN's DDR + NPU - the DMA npuflow's vector passes expose (ms) regressed on "
             "the outputs of RKNN's LUT-activated convolutions (M elements) and of its "
             "standalone elementwise layers (MB), over "
             f"the pairs published.yaml marks as fit for them ({', '.join(fitted)}):", ""]
    for target, fit in fit_rates(results).items():
        lines += [f"- **{target}**: LUT activation {fit['lut_rate']:.2f} elements per cycle "
                  "(`epilogue.lut_elements_per_cycle`), standalone elementwise pass "
                  f"{fit['vector_rate']:.2f} output bytes per cycle "
                  "(`vector_unit.output_bytes_per_cycle`); "
                  "board rest vs fit (ms): " + ", ".join(
                      f"{n} {x:.1f} / {p:.1f}" for n, x, p in fit["rows"])]
    return "\n".join(lines)
