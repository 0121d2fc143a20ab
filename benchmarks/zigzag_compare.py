"""npuflow vs ZigZag on the same small CNN and the same TPU-like 32x32 accelerator.

    python benchmarks/zigzag_compare.py

ZigZag (zigzag-dse, in ``benchmarks/.venv-zigzag``; it needs ``six``) runs through its
Python API with its own shipped ``tpu_like`` accelerator and mapping, LOMA searching for
minimal latency. npuflow runs its real pipeline (int8, the default passes) on
``benchmarks/conf/hardware/zigzag_tpu_like.yaml``, that accelerator translated field by
field, twice: *as ZigZag* (every layer reads its operands from DRAM and writes its output
back, ZigZag's per-layer assumption) and *default plan* (activations and weights resident
in SRAM where the memory planner fits them). Writes results/zigzag_compare.{md,json}.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import onnx
from _common import HERE, ensure_venv, read_csv, run_npuflow, write_result

from pipeline.zoo.builder import GraphBuilder

VENV = HERE / ".venv-zigzag"
PACKAGES = ["zigzag-dse==3.9.1", "six"]
PROFILE_DIR = HERE / "conf"
AS_ZIGZAG = ("compile.memory.sram_fraction=0", "compile.memory.weights=streamed")

EXPLANATION = """\
Why the numbers differ (both tools read the same ONNX file and the same accelerator):

- **Spatial mapping.** npuflow lowers a convolution to an im2col GEMM (rows = C x kh x kw,
  columns = output channels, time = output pixels), as TPU-style compilers do. ZigZag's
  `tpu_like` mapping unrolls input channels C on one array dimension and output channels K on
  the other, and runs the kernel window in time. A layer with few input channels (conv_1, C=3)
  uses 3 of 32 rows in ZigZag (ideal temporal cycles = 56 x 56 x 9) and 27 of 32 in npuflow.
- **Systolic fill and drain.** npuflow charges each fold 2R + C + T - 2 cycles (SCALE-Sim's
  model, agreeing with SCALE-Sim to 1 cycle: `scalesim_agreement`), so a layer cut into many
  folds pays the pipeline fill many times; ZigZag adds one drain term per layer.
- **Memory overlap.** ZigZag adds on-loading (filling the lower levels before compute starts),
  off-loading and port stalls to the ideal cycles; npuflow overlaps DMA and compute with double
  buffering (max(compute + first burst, memory)). Memory-bound layers agree best.
- **DRAM traffic.** Both count each operand's compulsory bytes; they agree exactly where
  npuflow's tiling streams every operand once. Where they differ, npuflow's `cycles` tiling
  objective chose smaller tiles that re-read an operand to shorten the exposed first load;
  with `compile.tiling.objective=energy` (the (e) columns) it streams each operand once.
- **Energy.** ZigZag prices every access at every level (register files, SRAM, DRAM, with
  16-bit partial sums) with its per-access costs; npuflow prices MACs, the array's SRAM
  reads/writes (SCALE-Sim access counts) and DRAM bytes, one pJ/B per level (the read
  cost). DRAM dominates both on this memory-bound accelerator (64-bit DRAM port).
- **Other ops.** ZigZag's workload is the Conv/Gemm layers (other nodes are dummies);
  npuflow also costs GlobalAveragePool on the vector unit. The totals say which is which.
"""


def small_cnn(path: Path) -> None:
    """The workload: four convolutions (3x3 and 1x1, stride 1 and 2) and a classifier."""
    g = GraphBuilder("small_cnn", seed=0, opset=17)
    x = g.input("input", (1, 3, 56, 56))
    x = g.relu(g.conv(x, 32, 3, 1))
    x = g.relu(g.conv(x, 64, 3, 2))
    x = g.relu(g.conv(x, 64, 3, 1))
    x = g.relu(g.conv(x, 128, 1, 1))
    g.output(g.gemm(g.flatten(g.global_avg_pool(x)), 10))
    onnx.save(onnx.shape_inference.infer_shapes(g.build()), path)


def run_zigzag(model: Path) -> dict:
    python = ensure_venv(VENV, PACKAGES)
    out = subprocess.run([str(python), str(HERE / "_zigzag_worker.py"), str(model)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def run_ours(model: Path, workdir: Path, label: str, *overrides: str) -> dict:
    run_dir = workdir / label
    metrics = run_npuflow(run_dir, "model=onnx", f"model.path={model}", "quant=int8",
                          "hardware=zigzag_tpu_like", "run.cache=false", *overrides,
                          config_dir=PROFILE_DIR)
    timings = json.loads((run_dir / "timings.json").read_text())
    return {"metrics": metrics, "timings": timings,
            "layers": {r["kernel"]: r for r in read_csv(run_dir / "simulate" / "layers.csv")}}


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def markdown(zz: dict, matched: dict, frugal: dict, default: dict) -> str:
    lines = ["npuflow columns are the *as ZigZag* runs; (e) = tiling objective `energy`.", "",
             "| layer | MACs | ZigZag ideal cyc. | npuflow compute cyc. | ZigZag latency cyc. "
             "| npuflow cyc. | ratio | ZigZag DRAM B | npuflow DRAM B | (e) DRAM B "
             "| ZigZag uJ | npuflow uJ | (e) uJ | ratio (e) |", "|---|" + "---|" * 13]
    totals = {"zz_cyc": 0.0, "np_cyc": 0.0, "zz_uj": 0.0, "np_uj": 0.0, "e_uj": 0.0}
    for layer in zz["layers"]:
        ours, e = matched["layers"][layer["name"]], frugal["layers"][layer["name"]]
        zz_uj, np_uj, e_uj = (layer["energy_pj"] / 1e6, float(ours["energy_uj"]),
                              float(e["energy_uj"]))
        np_cyc = int(ours["total_cycles"])
        for key, value in (("zz_cyc", layer["latency_cycles"]), ("np_cyc", np_cyc),
                           ("zz_uj", zz_uj), ("np_uj", np_uj), ("e_uj", e_uj)):
            totals[key] += value
        lines.append(
            f"| {layer['name']} | {layer['macs']:,} | {layer['ideal_temporal_cycles']:,.0f} | "
            f"{int(ours['compute_cycles']):,} | {layer['latency_cycles']:,.0f} | {np_cyc:,} | "
            f"{_ratio(np_cyc, layer['latency_cycles'])} | {layer['dram_bytes']:,.0f} | "
            f"{int(ours['dram_bytes']):,} | {int(e['dram_bytes']):,} | {zz_uj:.2f} | "
            f"{np_uj:.2f} | {e_uj:.2f} | {_ratio(e_uj, zz_uj)} |")
    lines.append(f"| **Conv+Gemm total** | | | | {totals['zz_cyc']:,.0f} | {totals['np_cyc']:,.0f} "
                 f"| {_ratio(totals['np_cyc'], totals['zz_cyc'])} | | | | {totals['zz_uj']:.2f} "
                 f"| {totals['np_uj']:.2f} | {totals['e_uj']:.2f} | "
                 f"{_ratio(totals['e_uj'], totals['zz_uj'])} |")
    m, d = matched["metrics"], default["metrics"]
    t_m, t_d = matched["timings"], default["timings"]
    lines += [
        "",
        "Whole model in npuflow (all ops, timeline, 1 GHz): as ZigZag "
        f"{m['latency_ms'] * 1e3:.1f} us, {m['energy_mj'] * 1e3:.2f} uJ, "
        f"{m['dram_bytes']:,} DRAM bytes; default plan {d['latency_ms'] * 1e3:.1f} us, "
        f"{d['energy_mj'] * 1e3:.2f} uJ, {d['dram_bytes']:,} DRAM bytes (activations and "
        "weights stay in the 2 MB SRAM, which ZigZag's per-layer evaluation does not assume).",
        "",
        "| wall time | ZigZag (API call, LOMA) | npuflow compile "
        "| npuflow simulate (incl. 3 PNGs) |",
        "|---|---|---|---|",
        f"| seconds | {zz['seconds']:.2f} | {t_m['compile']:.3f} | {t_m['simulate']:.3f} |",
        "",
        f"npuflow compile is {zz['seconds'] / t_m['compile']:,.0f}x faster than ZigZag's "
        f"search on this model ({t_d['compile']:.3f} s for the default plan); ZigZag "
        "explores spatial/temporal mappings per layer, npuflow evaluates a closed form over "
        "its tile grid.",
        "",
        EXPLANATION,
    ]
    return "\n".join(lines)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "small_cnn.onnx"
        small_cnn(model)
        zz = run_zigzag(model)
        matched = run_ours(model, Path(tmp), "as_zigzag", *AS_ZIGZAG)
        frugal = run_ours(model, Path(tmp), "as_zigzag_energy", *AS_ZIGZAG,
                          "compile.tiling.objective=energy")
        default = run_ours(model, Path(tmp), "default")
    text = markdown(zz, matched, frugal, default)
    write_result("zigzag_compare", text, {"zigzag": zz, "npuflow_as_zigzag": matched,
                                           "npuflow_as_zigzag_energy": frugal,
                                           "npuflow_default": default})
    print(text)


if __name__ == "__main__":
    main()
