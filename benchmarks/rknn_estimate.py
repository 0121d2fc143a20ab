"""Rockchip's own per-layer cycle estimate for the RK3588 and RK3568 next to npuflow's, and
both next to the board.

    python benchmarks/rknn_estimate.py [--only SUBSTRING ...]

RKNN-Toolkit2 (``rknn-toolkit2`` 2.5.0 in ``benchmarks/.venv-rknn``; with its torch the
first install is ~5.6 GB) builds each network for the pair's chip (the profile's name is
RKNN's target platform), and with verbose logging prints a layer table whose
``Cycles(DDR/NPU/Total)`` column is its compile-time estimate. It costs convolution-like
layers only: elementwise, resize, concat, normalisation and attention layers show 0. For
every rknn_model_zoo pair in ``silicon/published.yaml`` this script runs npuflow (the
pair's profile, one core, the pair's precision), hands RKNN the very ONNX file npuflow
optimized and compiled, matches layers by ONNX node name, and writes
results/rknn_estimate.{md,json}: per network RKNN's estimate and npuflow's compute cycles
on the same layers, what RKNN leaves unestimated, and the board's published time; the
board's time split into RKNN's DDR + NPU cycles of the layers it estimates and the rest,
each beside npuflow's share; per layer for the first network.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

import onnx
from _common import HERE, ensure_venv, run_npuflow, write_result
from rknn_rates import layer_outputs
from rknn_rates import markdown as rates_markdown
from silicon_agreement import load_pairs, overrides

from ops.work import ARRAY, VECTOR

VENV = HERE / ".venv-rknn"
PACKAGES = ["rknn-toolkit2==2.5.0"]
# the layer table's row; targets after the RK3588 (rk3576) add a SparseRatio column
ROW = re.compile(r"\] (\d+)\s+(\S+)\s+(\S+)\s+(NPU|CPU)\s+(.*?)\s+(\d+)/(\d+)/(\d+)"
                 r"\s+(?:\d+%\s+)?(\d+)\s+(\S+)")

BUILD = """
import sys
import numpy as np
import onnx
from rknn.api import RKNN
path, shape, quantize, data, target = sys.argv[1], \\
    [int(v) for v in sys.argv[2].split(",")], sys.argv[3] == "int8", sys.argv[4], sys.argv[5]
rknn = RKNN(verbose=True)
rknn.config(mean_values=[[0] * shape[1]], std_values=[[255] * shape[1]],
            target_platform=target)
name = onnx.load(path, load_external_data=False).graph.input[0].name
assert rknn.load_onnx(model=path, inputs=[name], input_size_list=[shape]) == 0
if quantize:
    np.save(data + ".npy", np.random.default_rng(0).random(shape, np.float32) * 255)
    open(data, "w").write(data + ".npy\\n")
assert rknn.build(do_quantization=quantize, dataset=data if quantize else None) == 0
"""

EXPLANATION = """\
What the comparison shows:

- **Where npuflow's rk3588 array model comes from.** Four of the profile's numbers are read
  off this estimate: the output stage takes 8 results per cycle, 32 kernels at a time
  (ceil(Cout / 32) x 4 cycles per output pixel for thin layers); every kernel tap takes a
  whole atom of 32 input channels (``tap_channels``: a 3-channel 6x6 stem costs 36 atoms
  per pixel, where im2col would pack it into 4); the depthwise engine runs 64 channels x 1
  tap per cycle, and at fp16 as fast as at int8 (``depthwise.full_rate``). The rk3568
  profile's array, output stage, depthwise engine and fp16 rate come from the same
  estimate built for target rk3568. Where npuflow and RKNN still differ per layer: the
  systolic fill and drain of each fold (1-2% on 3x3 layers, more on tiny 1x1 layers on
  1x1 maps), and fp16 layers whose atoms hold 16 channels (RKNN's fp16 stem costs what its
  int8 stem does; npuflow halves its rate).
- **RKNN's estimate is not the board.** RKNN charges each layer max(DDR, NPU) cycles. On
  the networks made of convolutions alone (mobilenet_v2, resnet50, the yolov5 and yolov8
  families) the board takes 1.3-2.2x that summed estimate on the RK3588 and 1.6-2.6x on
  the RK3566/68; against DDR + NPU cycles summed per layer it takes 1.03-1.14x on the
  RK3588 and 1.14-1.36x on the RK3566/68 (mobilenet_v2, resnet50, yolov5s_relu, whose every
  layer RKNN estimates): the NPU loads a convolution's operands, then computes. Both
  profiles say so (``dma.double_buffering: false``); with per-kernel dispatch that puts
  mobilenet_v2 and resnet50 at 0.86-1.18 on both chips, where overlapping DMA had them at
  0.6 on the RK3566/68. The RK3576 is the other way round: its boards take 0.90-1.15x
  RKNN's max(DDR, NPU) on mobilenet_v2, resnet50 and yolov5s_relu and only 0.60-0.79x its
  DDR + NPU, so its DMA overlaps the compute (``dma.double_buffering: true``; those three
  pairs are ``fit`` for it, chosen after all 19 RK3576 pairs had been seen at 1.22-1.77).
- **What the estimate leaves out, and the two rates read off the boards.** RKNN fuses
  SiLU, Sigmoid, HardSwish and HardSigmoid into the convolution before them (ConvExSwish,
  ConvSigmoid, ConvHardSwish, ConvHardSigmoid) and costs the fused layer as the plain
  convolution; it leaves standalone elementwise layers (Add, Mul, ...) at 0 cycles. The
  boards pay for both: yolov5s and yolov5s_relu have the same estimate, yet the board
  takes 5.5 ms longer with SiLU on the RK3588 and 12.6 ms on the RK3566/68, and PP-OCRv4
  det, whose PP-LCNetV3 backbone follows every HardSwish with a learnable affine block
  (a Mul by a float scalar, run in FLOAT, then an Add: 77 standalone elementwise layers),
  takes 3.8x RKNN's estimate on the RK3588 where convolution networks take 1.3-2.2x. The
  regression above puts rates on the two (RK3588: 5.10 LUT results per cycle, 2.76 output
  bytes per cycle for a standalone elementwise layer; RK3566/68: 1.30 and 1.36; 5.42 / 2.18
  and 1.36 / 0.92 until a vector pass loaded its operands before computing on these
  chips, as their convolutions do), and the
  profiles carry them: a lookup-table activation fuses into its convolution and adds
  ceil(outputs / ``epilogue.lut_elements_per_cycle``) cycles; a vector pass retires at
  most ``vector_unit.output_bytes_per_cycle`` (counted in elements since
  ``vector_unit.output_counts: element``: a 16-bit element leaves at an int8 one's rate). Before
  them npuflow ran SiLU as two vector passes and every elementwise layer at the DRAM rate
  (17 GB/s): PP-OCRv4 det and rec were at 0.57 / 0.49 on the RK3588 and 0.52 / 0.45 on
  the RK3566/68.
- **Where the disagreement lives** (the second table). npuflow's convolution kernels
  take about RKNN's DDR + NPU cycles on every build (resnet50 on the RK3588 1.32: the
  systolic fill and drain of its folds on 7x7 and 14x14 maps), so what is left of each
  miss is in the rest. The networks the rates were read from fit them by construction;
  the others check them: YOLOv6, YOLOv7-tiny and YOLOX (ReLU, LeakyReLU and SiLU
  detectors added after the profiles were fixed), and PP-OCRv4 rec in fp16, whose
  elementwise layers paid two bytes per element until the output stage counted elements
  (its rest 1.30 -> 0.78 of the board's on the RK3588, 3.04 -> 1.79 on the RK3576, 2.93
  -> 1.79 on the RK3562; only its four rows were re-run at 32662ef, no int8 figure
  moves). On the RK3566/68, YOLO11 and YOLOv10 add an attention block whose Softmax RKNN
  runs on the CPU (exSoftmax13), and the board's rest grew with it (YOLO11n's 2 x 400 x
  400 softmax, YOLO11s' 4 x 400 x 400) where npuflow's vectorised host charged 0.08 and
  0.16 ms. The three YOLO11 pairs set the host's time per exp on that fallback path
  (``host.transcendental_ns``, 43.4 ns: ``benchmarks/host_rates.py``); YOLOv10n and
  YOLOv10s check it (1.04 and 1.07 of their boards). On the RK3576 the lookup table
  works in line with the array (``epilogue.lut_overlap``), so npuflow's rest there is
  its vector, copy and transfer time, and whatever the table takes beyond the array.
- **The RK3562** (its 21 pairs all check pairs, first built here at 8168651). npuflow's
  convolutions took 0.96-1.14 of RKNN's rk3562 DDR + NPU, and some boards beat that sum
  (mobilenet_v2 by 0.7 ms, yolov5s_relu by 2.8 ms, before its 27 unestimated layers;
  resnet50 and yolov6s sit on it): the boards take 0.83-1.01x that sum where the RK3588's
  take 1.03-1.14x and the RK3566/68's 1.11-1.36x. The boards' rest beyond the sum is
  about half the RK3566/68's (yolov5s 9.8 against 18.0 ms, yolov8n 8.5 against 12.7), yet
  the table costs both the same (yolov5s less yolov5s_relu: 12.3 and 12.6 ms). So the
  RK3562's DMA overlaps its compute, as the RK3576's does (``dma.double_buffering: true``,
  chosen after all 21 pairs had been seen at 1.12-1.48; each is marked seen), and its
  table does not (``epilogue.lut_overlap`` false). The boards sit between RKNN's sum and
  its max(DDR, NPU) (1.24-1.49x of the max): the overlap is partial there, whole in the
  profile, and the networks made of convolutions alone come out at 0.84-0.92. Every row
  was re-run at 899df3e (at 2f7a82d before: the yolov5 family now built as the model
  zoo's, the Detect conv and its Sigmoid, no reshape or permute; RKNN's own columns for it
  did not move, only npuflow's).
  These builds also showed Softmax on the rk3562's NPU (YOLO11n's attention as
  exSDPAttention, PP-OCRv4 rec's exSoftmax13), which the profile had inherited as a CPU
  fallback from the rk3568; it now runs there. No RK3562 rate was fitted: every RK3562
  pair is a check pair, and no fit pair exists to read the rates from.
- ``rknn.eval_perf()`` on the boards (per-layer time) would check the two rates layer by
  layer; it needs the board, which this project does not have.
"""


def rknn_layers(python: Path, onnx_file: Path, shape: list[int], precision: str,
                target: str, tmp: Path) -> list[dict]:
    script = tmp / "build.py"
    script.write_text(BUILD)
    proc = subprocess.run([str(python), str(script), str(onnx_file),
                           ",".join(str(d) for d in shape), precision, str(tmp / "data.txt"),
                           target],
                          capture_output=True, text=True, cwd=tmp)
    log = proc.stdout + proc.stderr
    if proc.returncode:
        raise RuntimeError(f"rknn build of {onnx_file} failed:\n{log[-3000:]}")
    return [{"id": int(m[1]), "op": m[2], "dtype": m[3], "target": m[4], "shapes": m[5],
             "ddr": int(m[6]), "npu": int(m[7]), "total": int(m[8]), "rw_kb": int(m[9]),
             "node": m[10].split(":", 1)[-1]} for m in ROW.finditer(log)]


def input_shape(onnx_file: Path) -> list[int]:
    dims = onnx.load(onnx_file, load_external_data=False).graph.input[0].type.tensor_type
    return [d.dim_value for d in dims.shape.dim]


def compare(pair: dict, python: Path, tmp: Path) -> dict:
    run_dir = tmp / "npuflow"
    precision = "fp16" if "quant=fp16" in pair["overrides"] else "int8"
    run_npuflow(run_dir, *overrides(pair))  # silicon_agreement's runs, its fast settings
    onnx_file = run_dir / "optimize" / "model.onnx"  # the node names npuflow's plan uses
    target = next(o.split("=", 1)[1] for o in pair["overrides"] if o.startswith("hardware="))
    rknn = rknn_layers(python, onnx_file, input_shape(onnx_file), precision, target, tmp)
    by_node = {row["node"]: row for row in rknn}
    plan = json.loads((run_dir / "compile" / "plan.json").read_text())
    layers = []
    for kernel in plan["kernels"]:
        hits = [by_node[o] for o in kernel.get("ops", [kernel["name"]])
                if o in by_node and by_node[o]["npu"] > 0]
        if hits:
            layers.append({"node": hits[0]["node"], "rknn_op": hits[0]["op"],
                           "shapes": hits[0]["shapes"], "rknn_npu": hits[0]["npu"],
                           "npuflow": kernel["cost"]["compute_cycles"]  # RKNN leaves
                           - kernel["cost"]["lut_cycles"]})  # the LUT's time out
    unestimated = [r for r in rknn if r["total"] == 0 and r["target"] == "NPU"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    vector_dma = sum(max(0, k["cost"]["total_cycles"] - k["cost"]["overhead_cycles"]
                         - k["cost"]["compute_cycles"])  # what its DMA adds to its compute
                     for k in plan["kernels"]
                     if k["target"] == "npu" and k["cost"]["unit"] == VECTOR)
    convolutions = sum(k["cost"]["total_cycles"] - k["cost"]["lut_cycles"]  # depthwise too
                       for k in plan["kernels"]  # the LUT's time is not in RKNN's estimate
                       if k["target"] == "npu" and k["cost"]["unit"] == ARRAY)
    return {"network": pair["network"], "target": target, "precision": precision,
            "board_ms": pair["latency_ms"], "npuflow_ms": metrics["latency_ms"],
            "rknn_layers": len(rknn), "matched": len(layers),
            "rknn_npu": sum(x["rknn_npu"] for x in layers),
            "rknn_total_all": sum(r["total"] for r in rknn),
            "rknn_ddr_plus_npu_ms": sum(r["ddr"] + r["npu"] for r in rknn)
            / plan["frequency_mhz"] / 1e3,
            "npuflow_convolution_ms": convolutions / plan["frequency_mhz"] / 1e3,
            "npuflow_vector_dma_ms": vector_dma / plan["frequency_mhz"] / 1e3,
            "npuflow_compute": sum(x["npuflow"] for x in layers),
            "unestimated": len(unestimated),
            "unestimated_mb": sum(r["rw_kb"] for r in unestimated) / 1024, "layers": layers,
            **layer_outputs(rknn, precision)}


def markdown(results: list[dict]) -> str:
    lines = ["| network | target | precision | RKNN layers (unestimated) | RKNN estimate, all "
             "layers | board | board / RKNN estimate | npuflow / RKNN on matched layers | "
             "npuflow |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        est_ms = r["rknn_total_all"] / 1e6  # 1 GHz
        lines.append(
            f"| {r['network']} | {r['target']} | {r['precision']} | {r['rknn_layers']} "
            f"({r['unestimated']}, "
            f"{r['unestimated_mb']:.1f} MB moved) | {est_ms:.2f} ms | {r['board_ms']:.2f} ms "
            f"| {r['board_ms'] / est_ms:.2f} | "
            f"{r['npuflow_compute'] / max(r['rknn_npu'], 1):.2f} ({r['matched']} layers) | "
            f"{r['npuflow_ms']:.2f} ms |")
    lines += ["", "Where the board's time goes (ms; RKNN's cycles at the profile's NPU "
              "clock). RKNN's DDR and NPU cycles summed over the layers it estimates (the "
              "convolutions, their fused activations included) against npuflow's array and "
              "depthwise-engine kernels without their lookup-table time; the board's "
              "remaining time, spent where RKNN's estimate does not look (lookup-table "
              "activations, elementwise, resize, concat, attention, CPU layers), against the "
              "rest of npuflow's latency (lookup tables, vector, copy and host kernels, "
              "transfers, pre- and post-processing):", "",
              "| network | target | RKNN DDR + NPU | npuflow convolutions | ratio | board - RKNN "
              "DDR + NPU | npuflow, the rest | ratio | board | npuflow |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        conv_ms = r["rknn_ddr_plus_npu_ms"]
        rest, ours = r["board_ms"] - conv_ms, r["npuflow_ms"] - r["npuflow_convolution_ms"]
        lines.append(
            f"| {r['network']} | {r['target']} | {conv_ms:.2f} | "
            f"{r['npuflow_convolution_ms']:.2f} | {r['npuflow_convolution_ms'] / conv_ms:.2f} | "
            f"{rest:.2f} | {ours:.2f} | {ours / rest:.2f} | {r['board_ms']:.2f} | "
            f"{r['npuflow_ms']:.2f} |")
    first = results[0]
    lines += ["", f"Per layer, {first['network']} (the 15 RKNN costs most; NPU cycles, "
              "npuflow's compute cycles of the kernel that holds the layer):", "",
              "| layer | RKNN op | shapes | RKNN | npuflow | ratio |", "|---|---|---|---|---|---|"]
    for x in sorted(first["layers"], key=lambda x: -x["rknn_npu"])[:15]:
        lines.append(f"| {x['node']} | {x['rknn_op']} | `{x['shapes']}` | {x['rknn_npu']:,} | "
                     f"{x['npuflow']:,} | {x['npuflow'] / max(x['rknn_npu'], 1):.2f} |")
    return "\n".join(lines) + "\n\n" + rates_markdown(results) + "\n\n" + EXPLANATION


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args()
    _, pairs = load_pairs(args.only)
    pairs = sorted((p for p in pairs if p["source"].startswith("rknn_zoo")),
                   key=lambda p: ("rk3568" in p["profile"], "ppocr" not in p["network"]))
    python = ensure_venv(VENV, PACKAGES)
    results = []
    for pair in pairs:
        with tempfile.TemporaryDirectory() as tmp:
            results.append(compare(pair, python, Path(tmp)))
        print(f"{pair['network']}: done", flush=True)
    text = markdown(results)
    write_result("rknn_estimate", text, results)
    print(text)


if __name__ == "__main__":
    main()
