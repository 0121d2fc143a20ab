"""RKNN-Toolkit2's compile-time estimate of single layers, per target chip: where a Rockchip
profile's array numbers come from.

    python benchmarks/rknn_layers.py [TARGET ...]   # default: rk3588 rk3568 rk3576 rk3562

Each probe is a one-layer ONNX network built for the target by RKNN-Toolkit2 2.5.0
(``benchmarks/.venv-rknn``, as ``rknn_estimate.py`` installs it); the layer table's
``Cycles(DDR/NPU/Total)`` is read for the layer, summed over the layers RKNN lowers it to
(the ``lowering`` probes: a large kernel or stride becomes parts, selects and sums, which
``ops/conv_lowering.py`` models). The probes isolate one mechanism each:
the array's MAC rate (a deep 1x1 convolution, int8 and fp16), the output stage (a thin
1x1 convolution on a large map), the input atom per kernel tap (a 3-channel 6x6 stem), the
depthwise engine (3x3, int8 and fp16) and the DDR rate (a large fully connected layer).
Writes results/rknn_layers.{md,json}.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from _common import write_result
from onnx import TensorProto, helper, numpy_helper
from rknn_estimate import BUILD, ROW, VENV

# name -> (what it isolates, (Cin, Cout, k, H, W, group, stride), precision)
PROBES = {
    "deep_1x1": ("MAC rate: 128 -> 128 1x1 at 12x160", (128, 128, 1, 12, 160, 1, 1), "int8"),
    "deep_1x1_fp16": ("fp16 MAC rate", (128, 128, 1, 12, 160, 1, 1), "fp16"),
    "thin_1x1": ("output stage: 16 -> 32 1x1 at 240x240", (16, 32, 1, 240, 240, 1, 1), "int8"),
    "stem_6x6": ("atom per tap: 3 -> 32 6x6 at 320x320 (stride 2 from 640)",
                 (3, 32, 6, 640, 640, 1, 2), "int8"),
    "dw_3x3": ("depthwise: 48 channels 3x3 at 120x120", (48, 48, 3, 120, 120, 48, 1), "int8"),
    "dw_3x3_fp16": ("fp16 depthwise", (48, 48, 3, 120, 120, 48, 1), "fp16"),
    "patch_32": ("lowering: 3 -> 768 32x32 stride 32 at 224x224 (ViT-B/32's patches)",
                 (3, 768, 32, 224, 224, 1, 32), "fp16"),
    "stride_16": ("lowering: 3 -> 768 16x16 stride 16 at 224x224 (ViT-B/16's patches)",
                  (3, 768, 16, 224, 224, 1, 16), "fp16"),
    "patch_9": ("lowering: 3 -> 64 9x9 stride 9 at 225x225 (odd patches)",
                (3, 64, 9, 225, 225, 1, 9), "fp16"),
    "kernel_17": ("lowering: 16 -> 16 17x17 stride 1 at 64x64 (kernel parts)",
                  (16, 16, 17, 64, 64, 1, 1), "fp16"),
    "fc_4096": ("DDR: 4096 -> 4096 fully connected (16 MB fp32, 16 MB int8 weights)",
                (4096, 4096, 1, 1, 1, 1, 1), "int8"),
    # matrix-vector rows: a 1024 -> 1024 fully connected layer on M rows (1 x M pixels)
    "fc_m1": ("rows: 1024 -> 1024 on 1 row", (1024, 1024, 1, 1, 1, 1, 1), "int8"),
    "fc_m8": ("rows: 1024 -> 1024 on 8 rows", (1024, 1024, 1, 1, 8, 1, 1), "int8"),
    "fc_m16": ("rows: 1024 -> 1024 on 16 rows", (1024, 1024, 1, 1, 16, 1, 1), "int8"),
    "fc_m32": ("rows: 1024 -> 1024 on 32 rows", (1024, 1024, 1, 1, 32, 1, 1), "int8"),
    "fc_m1_fp16": ("rows: 1024 -> 1024 on 1 row, fp16", (1024, 1024, 1, 1, 1, 1, 1), "fp16"),
    # a prefill's matrix product: Qwen2-0.5B's MLP up projection over a 128-token prompt
    "fc_m128": ("prefill: 896 -> 4864 on 128 rows", (896, 4864, 1, 1, 128, 1, 1), "int8"),
    "fc_m128_fp16": ("prefill: 896 -> 4864 on 128 rows, fp16", (896, 4864, 1, 1, 128, 1, 1),
                     "fp16"),
}


def probe_model(path: Path, spec: tuple[int, ...]) -> list[int]:
    cin, cout, k, h, w, group, stride = spec
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(
        (rng.standard_normal((cout, cin // group, k, k)) * 0.05).astype(np.float32), "w")
    pad = (k - 1) // 2 if stride == 1 else (k - stride) // 2
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="probe", group=group,
                            strides=[stride, stride], pads=[pad] * 4)
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, cin, h, w])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    return [1, cin, h, w]


def estimate(target: str, name: str, tmp: Path) -> dict:
    import subprocess

    what, spec, precision = PROBES[name]
    path = tmp / f"{name}.onnx"
    shape = probe_model(path, spec)
    proc = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", BUILD, str(path), ",".join(map(str, shape)),
         precision, str(tmp / f"{name}.txt"), target], capture_output=True, text=True)
    rows = [m.groups() for m in map(ROW.search, (proc.stdout + proc.stderr).splitlines()) if m]
    npu = [r for r in rows if r[3] == "NPU"]
    if not any(r[1].startswith("Conv") for r in npu):
        return {"target": target, "probe": name, "what": what, "error": proc.stderr[-300:]}
    # a lowered probe is several layers (parts, selects, sums): their cycles summed
    ddr, npu_cycles, total = (sum(int(r[i]) for r in npu) for i in (5, 6, 7))
    return {"target": target, "probe": name, "what": what, "precision": precision,
            "ddr_cycles": ddr, "npu_cycles": npu_cycles, "total_cycles": total,
            "layers": [r[1] for r in npu]}


def markdown(rows: list[dict]) -> str:
    lines = ["RKNN-Toolkit2 2.5.0's estimate of one-layer probes (cycles at the NPU clock):",
             "", "| target | probe | what it isolates | precision | DDR | NPU | total |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['target']} | {r['probe']} | {r['what']} | - | - | - | "
                         f"failed |")
            continue
        lines.append(f"| {r['target']} | {r['probe']} | {r['what']} | {r['precision']} "
                     f"| {r['ddr_cycles']:,} | {r['npu_cycles']:,} | {r['total_cycles']:,} |")
    return "\n".join(lines)


def main() -> None:
    targets = sys.argv[1:] or ["rk3588", "rk3568", "rk3576", "rk3562"]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [estimate(t, name, Path(tmp)) for t in targets for name in PROBES]
    text = markdown(rows)
    write_result("rknn_layers", text, rows)
    print(text)


if __name__ == "__main__":
    main()
