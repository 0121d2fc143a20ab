"""npuflow's systolic compute cycles vs SCALE-Sim v3, layer by layer.

    python benchmarks/scalesim_agreement.py [--quick]

Creates ``benchmarks/.venv-scalesim`` on first use (SCALE-Sim pins numpy < 2.4, so it
lives in its own venv), runs every layer on 32x32 and 128x128 arrays in ws, os and is
dataflows with ideal memory, and compares SCALE-Sim's total cycles with
``hardware.systolic.compute_cycles`` applied to the GEMM that ``ops`` lowers the layer to
(each layer is a real one-node ONNX graph, so the im2col lowering is checked too).
Conv inputs are pre-padded and trimmed to the rows ONNX uses, because SCALE-Sim takes
unpadded inputs and rounds its output size up where ONNX rounds down.
Prints a markdown table and the max relative error; writes results/scalesim_agreement.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time

import numpy as np
from _common import HERE, ensure_venv, quick_flag, write_result
from onnx import helper, numpy_helper

from hardware.systolic import compute_cycles
from ops.load import from_onnx
from ops.registry import work_of

VENV = HERE / ".venv-scalesim"
PACKAGES = ["numpy<2.4", "scalesim"]

# name, kind, conv (oh, kh, c, n, stride) | gemm (m, k, n); sizes from real networks.
LAYERS = [
    ("resnet_3x3_s1", "conv", (14, 3, 64, 64, 1)),
    ("resnet_3x3_s2", "conv", (14, 3, 32, 64, 2)),
    ("stem_7x7_s2", "conv", (28, 7, 3, 64, 2)),
    ("mbv2_pointwise", "conv", (28, 1, 32, 96, 1)),
    ("bert_qkv_slice", "gemm", (128, 768, 64)),
    ("classifier_fc", "gemm", (1, 1280, 1000)),
    ("odd_gemm", "gemm", (100, 50, 70)),
]
ARRAYS = ((32, 32), (128, 128))
DATAFLOWS = ("ws", "os", "is")


def onnx_layer(kind: str, dims: tuple[int, ...]):
    """A one-node ONNX graph for the layer, and SCALE-Sim's description of it."""
    if kind == "conv":
        oh, k, c, n, s = dims
        ih = (oh - 1) * s + k  # exactly the input rows ONNX reads: no rounding ambiguity
        x = helper.make_tensor_value_info("x", 1, [1, c, ih, ih])
        y = helper.make_tensor_value_info("y", 1, [1, n, oh, oh])
        w = numpy_helper.from_array(np.zeros((n, c, k, k), np.float32), "w")
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k],
                                strides=[s, s], pads=[0, 0, 0, 0])
        scalesim = {"kind": "conv", "ih": ih, "iw": ih, "kh": k, "kw": k, "c": c, "n": n,
                    "stride": s}
    else:
        m, k, n = dims
        x = helper.make_tensor_value_info("x", 1, [m, k])
        y = helper.make_tensor_value_info("y", 1, [m, n])
        w = numpy_helper.from_array(np.zeros((k, n), np.float32), "w")
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        scalesim = {"kind": "gemm", "m": m, "n": n, "k": k}
    graph = from_onnx(helper.make_model(helper.make_graph([node], "l", [x], [y], [w])))
    return graph, scalesim


def run(quick: bool) -> list[dict]:
    layers = LAYERS[:3] if quick else LAYERS
    arrays = ARRAYS[:1] if quick else ARRAYS
    jobs, ours = [], []
    for name, kind, dims in layers:
        graph, desc = onnx_layer(kind, dims)
        gemm = work_of(graph.nodes[0], graph).gemm
        for rows, cols in arrays:
            for df in DATAFLOWS:
                start = time.perf_counter()
                est = compute_cycles(gemm, rows, cols, df)
                ours.append((est.cycles, time.perf_counter() - start, gemm))
                jobs.append({**desc, "name": name, "rows": rows, "cols": cols, "dataflow": df})
    python = ensure_venv(VENV, PACKAGES)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(jobs, f)
    out = subprocess.run([str(python), str(HERE / "_scalesim_worker.py"), f.name],
                         check=True, capture_output=True, text=True).stdout
    rows = []
    for ref, (cycles, seconds, gemm) in zip(json.loads(out), ours, strict=True):
        rows.append({
            "layer": ref["name"], "array": f"{ref['rows']}x{ref['cols']}",
            "dataflow": ref["dataflow"], "gemm_mkn": [gemm.m, gemm.k, gemm.n],
            "scalesim_cycles": ref["total_cycles"], "npuflow_cycles": cycles,
            "rel_error": abs(cycles - ref["total_cycles"]) / ref["total_cycles"],
            "scalesim_seconds": ref["seconds"], "npuflow_seconds": seconds,
            "scalesim_stalls": ref["stall_cycles"],
        })
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| layer | array | df | M x K x N | SCALE-Sim | npuflow | rel. error "
             "| SCALE-Sim s | npuflow us |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m, k, n = r["gemm_mkn"]
        lines.append(f"| {r['layer']} | {r['array']} | {r['dataflow']} | {m}x{k}x{n} | "
                     f"{r['scalesim_cycles']:,} | {r['npuflow_cycles']:,} | "
                     f"{100 * r['rel_error']:.3f}% | {r['scalesim_seconds']:.2f} | "
                     f"{1e6 * r['npuflow_seconds']:.1f} |")
    worst = max(r["rel_error"] for r in rows)
    speed = sum(r["scalesim_seconds"] for r in rows) / sum(r["npuflow_seconds"] for r in rows)
    lines += ["", f"max relative error: {100 * worst:.3f}% over {len(rows)} layer runs; "
              f"npuflow is {speed:,.0f}x faster in total wall time"]
    return "\n".join(lines)


def main() -> None:
    quick = quick_flag(__doc__, "3 layers, one array")
    rows = run(quick)
    text = markdown(rows)
    write_result("scalesim_agreement", text, rows)
    print(text)
    if max(r["rel_error"] for r in rows) > 0.01:
        sys.exit("FAIL: npuflow and SCALE-Sim differ by more than 1%")


if __name__ == "__main__":
    main()
