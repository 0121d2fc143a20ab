"""npuflow vs Arm Vela on eight embedded networks, per layer, on three Ethos-U configurations.

    python benchmarks/vela_compare.py [--convert] [--only NAME ...]

Vela (``ethos-u-vela`` 5.2.0 in ``benchmarks/.venv-vela``) compiles each int8 TFLite file
for each target of ``TARGETS``: an accelerator configuration with one of Arm's ``vela.ini``
system configs and memory mode ``Shared_Sram`` (weights in flash or DRAM, tensor arena in
SRAM), and writes its per-layer and summary CSVs. npuflow runs its real pipeline on the
float network as ONNX (``tflite2onnx`` for MLPerf Tiny's files, tf2onnx for the four
``make_keras_tflite.py`` writes; npuflow quantizes it itself to int8 with onnxruntime) on
the target's profile in ``conf/hardware/``. The first target,
``ethos_u55_256``, is the one the profile was built against; ``ethos_u55_128``,
``ethos_u55_64`` and ``ethos_u65_256`` were written from Vela's architecture numbers alone
and are held out, as are every network but ResNet-8 and ad01 (MLPerf Tiny's DS-CNN and
MobileNetV1; a CIFAR CNN, MobileNetV2, MobileNetV3-Small and a U-Net). Per layer (first
target only), layers are matched in execution order by kind (convolution, fully
connected, add, pool, softmax; Vela's ~20-op softmax decomposition is summed).
``--convert`` re-creates MLPerf Tiny's ONNX files from their float TFLite files. Writes
results/vela_compare.{md,json}.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx
from _common import HERE, ensure_venv, read_csv, run_npuflow, write_result

VENV = HERE / ".venv-vela"
PACKAGES = ["ethos-u-vela==5.2.0", "tflite2onnx==0.4.1"]
MODELS = HERE / "models"
NETWORKS = [  # (name, int8 TFLite for Vela, float TFLite or None, ONNX for npuflow)
    ("ResNet-8 (image classification)", "mlperf_tiny/pretrainedResnet_quant.tflite",
     "mlperf_tiny/pretrainedResnet.tflite", "mlperf_tiny/pretrainedResnet.onnx"),
    ("ad01 autoencoder (anomaly detection)", "mlperf_tiny/ad01_int8.tflite",
     "mlperf_tiny/ad01_fp32.tflite", "mlperf_tiny/ad01_fp32.onnx"),
    # Built by make_mlperf_tiny_tflite.py (MLPerf Tiny's architectures, seeded weights).
    ("DS-CNN (keyword spotting)", "mlperf_tiny/kws_ds_cnn_int8.tflite",
     "mlperf_tiny/kws_ds_cnn_fp32.tflite", "mlperf_tiny/kws_ds_cnn_fp32.onnx"),
    ("MobileNetV1 x0.25 96x96 (visual wake words)",
     "mlperf_tiny/vww_mobilenet_v1_025_int8.tflite",
     "mlperf_tiny/vww_mobilenet_v1_025_fp32.tflite",
     "mlperf_tiny/vww_mobilenet_v1_025_fp32.onnx"),
    # Built by make_keras_tflite.py (seeded; its ONNX comes from tf2onnx, not --convert).
    ("CIFAR CNN (4 convs, max pooling, FC 4096->128)", "keras_seeded/cifar_cnn_int8.tflite",
     None, "keras_seeded/cifar_cnn_fp32.onnx"),
    ("MobileNetV2 x0.35 96x96", "keras_seeded/mobilenet_v2_035_96_int8.tflite", None,
     "keras_seeded/mobilenet_v2_035_96_fp32.onnx"),
    ("MobileNetV3-Small x0.75 96x96 (HardSwish, squeeze-excite)",
     "keras_seeded/mobilenet_v3s_075_96_int8.tflite", None,
     "keras_seeded/mobilenet_v3s_075_96_fp32.onnx"),
    ("U-Net 64x64 (resize, concat)", "keras_seeded/unet_64_int8.tflite", None,
     "keras_seeded/unet_64_fp32.onnx"),
]
TARGETS = [  # (npuflow profile, Vela accelerator config, vela.ini system config, memory mode)
    ("ethos_u55_256", "ethos-u55-256", "Ethos_U55_High_End_Embedded", "Shared_Sram"),
    ("ethos_u55_128", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram"),
    ("ethos_u55_64", "ethos-u55-64", "Ethos_U55_High_End_Embedded", "Shared_Sram"),
    ("ethos_u65_256", "ethos-u65-256", "Ethos_U65_Mid_End", "Shared_Sram"),
    ("ethos_u85_256", "ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Dedicated_Sram_384KB"),
    ("ethos_u85_1024", "ethos-u85-1024", "Ethos_U85_SYS_DRAM_Mid", "Dedicated_Sram_384KB"),
]
VELA_KIND = {"Conv2D": "conv", "DepthwiseConv2D": "conv", "FullyConnected": "fc",
             "Add": "add", "AvgPool": "pool", "MaxPool": "pool", "Softmax": "softmax",
             "Mean": "pool"}
# Vela's cycles are its command stream's, the input already in the arena: npuflow's without
# the application's hand-over of the graph's inputs and outputs (graph_io)
CYCLES = "cycles_excluding_io"
OURS_KIND = {"Conv": "conv", "Gemm": "fc", "MatMul": "fc", "Add": "add",
             "AveragePool": "pool", "MaxPool": "pool", "GlobalAveragePool": "pool",
             "Softmax": "softmax"}

EXPLANATION = """\
Why the numbers differ (the same network, the same accelerator, two models of it):

- **Which pairs are checks.** `benchmarks/silicon/published.yaml` says, per pair, whether
  it was used to set or choose a profile value (`fit`) or first compared after the profile
  was fixed (`check`); only checks make a headline. The ethos_u55_128, ethos_u55_64 and
  ethos_u65_256 profiles change only what Vela's architecture tables say differs (MAC
  count and output micro-block, elementwise units, AXI width, the system config's clock
  and memory). The two Ethos-U85 profiles were written from Vela 5.2's configuration
  (Ethos_U85_SYS_DRAM_Mid, Dedicated_Sram_384KB) and their Vela cycles recorded before
  npuflow ran on them; their first comparison missed (U85-256 0.54-1.08, U85-1024
  0.56-1.57), and what changed since is each a rule of Vela's, read in its C++ back end
  (regor) after those pairs were seen (they stay check pairs, marked so in RESULTS.md):
  the U85's MAC engine takes the output microblock that fits the layer (regor's 2x4x16
  beside 2x2x32 on 1024 MACs: `mac_array.shapes`); each DMA channel moves at most the
  bursts its read buffer holds over the DRAM's latency (Little's law; regor's `ChannelBW`
  with its per-configuration read buffers: on the U85-256 a weight or feature-map stream
  gets 3.3 of the port's 12 bytes per cycle: `units.dma_channels`; the SRAM's own
  streams 20.5 of its 32), and a layer's 10-byte per-channel scale words come through a
  channel only two bursts deep (0.41 bytes per cycle: ~24 cycles per output channel),
  re-read for every output block the accumulator RAM holds (regor's block search,
  `hardware/output_blocks.py`: 55 blocks where Vela's cycles imply 60 on MobileNetV2's
  48x48 expansion), which sets most of a small network's layers;
  in Dedicated_Sram the arena is in DRAM but the scheduler stages every intermediate
  feature map that fits in the SRAM (`FastStorageAllocator`: `sram.arena: budget`; Vela
  writes no feature map to DRAM on ResNet-8); an elementwise op is chained onto the
  convolution that produces its input (`EthosU85OpGroup::Chain`: ResNet-8's residual Adds
  take 0 cycles: `epilogue.residual_add`); regor's per-operator estimate has no fixed
  per-operator term (`dispatch_cycles: 0`). And on every Ethos-U configuration, a
  Concat input that something else also reads (a U-Net's skip connection) is copied into
  its slice; only an input computed for the Concat alone is written in place (regor's
  `RewriteConcat`; the U55's per-layer report charges the same copies). npuflow's side
  of every row is `cycles_excluding_io`: Vela's cycles are its command stream's, the
  input already in the arena, so the application's hand-over of the graph's input and
  output (`graph_io`, 2 x 5 us on the Ethos-U profiles: 10,000 cycles at the U85's 1
  GHz, a fifth of ad01) is left out. Then, read in regor after the U85 pairs were seen
  at 0.59-1.16 (and U65 ad01 at 0.72), four more of its rules: the input the host wrote
  (a 3-channel image, channels last in DRAM) is fetched in bursts of one input block's
  depth, 16 where regor runs the stem kernel-first, so each 128-byte burst carries 16
  useful bytes (`EstimateMemoryTransfer`; the stem of a 96x96 MobileNet reads its 27 KB
  at an eighth of the channel's rate); a kernel-first convolution steps its taps four at
  a time, a 3x3 kernel in three steps of 12 taps' time
  (`EstimateMacCyclesPerBlock`: `mac_array.kernel_first_taps`; ResNet-8's 16-channel
  3x3 layers); a copy (the U-Net's skip copies) runs on the pooling engine as a 1x1
  average pool at four kernel steps per micro-block (`UseAvgPoolNop`:
  `units.pooling_copy`); and on every Ethos-U the weight decoder takes 32 cycles for an
  8-channel micro-block's weights over an input slice however few pixels share them
  (Vela's `cycles_wb`: `mac_array.weight_decode`), which sets a fully connected layer's
  time on the U65 (ad01: 0.72 -> 0.82). tf2onnx's last Transposes (NCHW -> NHWC before
  each output) go with its first: the application reads NHWC. What is still Vela's alone:
  its 2-D block shapes and the halo each block re-reads, its per-block delays, output
  and command cycles, its resize, and its cascading of feature maps.
- **The TFLite file and the float ONNX.** The TFLite column compiles the very file Vela
  compiles. The ONNX column is the float twin quantized by npuflow; tf2onnx's first
  Transpose (NHWC -> NCHW) is the application's layout (`ops/io_layout.py`), not a kernel;
  the flatten before a fully connected layer still is one (the "ops on CPU" column).

- **What is modelled in common.** Both run every operator on the NPU (average pooling 8x8
  without padding included), convolutions with their fused ReLU, the residual Adds as
  elementwise passes of their own (int8: rescale both inputs, add, requantize; Vela charges
  0.75 cycles per element on the U55-256, npuflow 6 operations on 8 lanes, the same), and
  the weights streamed from flash at 1 byte per cycle every inference, compressed.
- **Convolution compute.** Vela walks the U55's block structure (2x2x8 output
  micro-blocks, ifm blocks of 8 channels, its own block configs per layer); npuflow maps the
  256 MACs as a 16x16 output-stationary array with SCALE-Sim's fold model. Both reach
  65-85% MAC utilization on the 3x3 layers; they differ most on the first layer (3 input
  channels) and the 1x1 shortcut convolutions.
- **Weights.** Vela's encoder (palette + Golomb-Rice) sizes each stream exactly and
  interleaves weights with scale/bias words (10 bytes per output channel); npuflow sizes
  the stream at the Shannon entropy of *its own* int8 weights and counts biases as 4-byte
  constants. The weights are not the same bytes: npuflow quantizes the float network with
  onnxruntime, per output channel, so every channel spans the full int8 range; the TFLite
  file's fully connected weights are quantized per tensor, so most values sit near zero
  and compress further. That is most of ad01's gap (Vela 196 KiB of flash, 0.74 of raw;
  npuflow ~0.9 of raw), layer by layer on its 128x128 layers.
- **Overlap.** Vela overlaps a layer's weight fetch with the layer's own compute and with
  the previous layer's (it schedules weight buffers across operators); npuflow overlaps
  within a kernel (double buffering) and exposes the first tile's fetch, so weight-heavy
  layers cost npuflow up to one tile more.
- **Softmax.** Vela lowers it to ~20 elementwise and LUT operations on the NPU; npuflow
  costs one vector kernel of 5 operations per element. Tiny either way.
"""


@dataclass(frozen=True)
class Vela:
    """Vela's venv python and the vela.ini its wheel ships (found once per run)."""

    python: Path
    ini: str

    @classmethod
    def install(cls) -> Vela:
        python = ensure_venv(VENV, PACKAGES)
        ini = subprocess.run(
            [str(python), "-c", "import ethosu.vela, pathlib; print(pathlib.Path("
             "ethosu.vela.__file__).parent.parent / 'config_files' / 'Arm' / 'vela.ini')"],
            check=True, capture_output=True, text=True).stdout.strip()
        return cls(python, ini)


def convert(python: Path) -> None:
    for _, _, float_file, onnx_file in NETWORKS:
        if float_file is None:
            continue
        subprocess.run([str(python.parent / "tflite2onnx"), str(MODELS / float_file),
                        str(MODELS / onnx_file)], check=True)
        flatten_gemm_inputs(MODELS / onnx_file)


def flatten_gemm_inputs(path: Path) -> None:
    """A Flatten before every Gemm: TFLite's FullyConnected flattens its input itself (newer
    converters drop the Reshape before it), tflite2onnx 0.4.1 passes the 4-D tensor to a
    Gemm, which ONNX requires 2-D. On a 2-D input Flatten is the identity."""
    model = onnx.load(path)
    nodes = []
    for node in model.graph.node:
        if node.op_type == "Gemm":
            flat = f"{node.input[0]}_flat"
            nodes.append(onnx.helper.make_node("Flatten", [node.input[0]], [flat], axis=1,
                                               name=f"{node.name}_flatten"))
            node.input[0] = flat
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def run_vela(vela: Vela, tflite: str, target: tuple[str, str, str, str], out: Path
             ) -> tuple[dict, list[dict]]:
    _, accelerator, system, memory_mode = target
    subprocess.run([str(vela.python.parent / "vela"), str(MODELS / tflite), "--config", vela.ini,
                    "--accelerator-config", accelerator, "--system-config", system,
                    "--memory-mode", memory_mode, "--verbose-performance",
                    "--output-dir", str(out)], check=True, capture_output=True)
    stem = Path(tflite).stem
    summary = read_csv(out / f"{stem}_summary_{system}.csv")[0]
    return summary, read_csv(out / f"{stem}_per-layer.csv")


def vela_layers(rows: list[dict]) -> list[dict]:
    """Vela's rows as layers: fused activations (0 cycles) dropped, softmax summed."""
    layers: list[dict] = []
    for row in rows:
        kind = VELA_KIND.get(row["Original Operator"], row["Original Operator"].lower())
        cycles, macs = int(float(row["Op Cycles"])), int(float(row["MAC Count"]))
        if kind == "softmax" and layers and layers[-1]["kind"] == "softmax":
            layers[-1]["cycles"] += cycles
            continue
        if not cycles and not macs:
            continue
        layers.append({"kind": kind, "cycles": cycles, "macs": macs,
                       "name": row["Name"].split(";")[0]})
    return layers


def our_layers(run_dir: Path) -> list[dict]:
    layers = []
    for row in read_csv(run_dir / "simulate" / "layers.csv"):
        if row["unit"] == "free":
            continue
        first = row["ops"].split("+")[0]
        layers.append({"kind": OURS_KIND.get(first, first.lower()),
                       "cycles": int(row["total_cycles"]), "macs": int(row["macs"]),
                       "name": row["kernel"], "target": row["target"], "bound": row["bound"]})
    return layers


def align(vela: list[dict], ours: list[dict]) -> list[tuple[dict | None, dict | None]]:
    """Each Vela layer with the first unused npuflow kernel of the same kind and MAC count
    (the two tools may order independent branches differently; pools and softmax by kind
    alone: Vela counts a pool's additions as MACs, npuflow none); leftovers unpaired."""
    used: set[int] = set()
    pairs: list[tuple[dict | None, dict | None]] = []
    for v in vela:
        match = next((j for j, o in enumerate(ours) if j not in used and o["kind"] == v["kind"]
                      and (o["macs"] == v["macs"] or not v["macs"]
                           or v["kind"] in ("softmax", "pool"))),
                     None)
        if match is not None:
            used.add(match)
        pairs.append((v, None if match is None else ours[match]))
    return pairs + [(None, o) for j, o in enumerate(ours) if j not in used]


def compare(name: str, int8: str, onnx_file: str, target: tuple[str, str, str, str],
            vela: Vela, tmp: Path) -> dict:
    profile = target[0]
    summary, rows = run_vela(vela, int8, target, tmp / f"vela_{profile}_{Path(int8).stem}")
    model = ("model=onnx", f"model.path={MODELS / onnx_file}", f"hardware={profile}",
             "quant=int8", "run.cache=false")
    run_dir = tmp / f"npuflow_{profile}_{Path(onnx_file).stem}"
    metrics = run_npuflow(run_dir, *model)
    per_tensor = run_npuflow(tmp / f"per_tensor_{profile}_{Path(onnx_file).stem}", *model,
                             "quant.per_channel=false")
    shipped = run_npuflow(tmp / f"tflite_{profile}_{Path(int8).stem}", "model=tflite",
                          f"model.path={MODELS / int8}", f"hardware={profile}",
                          "quant=as_is", "run.cache=false")
    pairs = align(vela_layers(rows), our_layers(run_dir))
    return {"name": name, "profile": profile, "accelerator": target[1],
            "system_config": target[2], "vela_cycles": int(float(summary["cycles_total"])),
            "vela_npu_cycles": int(float(summary["cycles_npu"])),
            "vela_flash_cycles": int(max(float(summary.get(key) or 0) for key in (
                "cycles_off_chip_flash_access", "cycles_dram_access"))),
            "npuflow_cycles": metrics[CYCLES], "npuflow_cpu_ops": metrics["cpu_ops"],
            "npuflow_per_tensor_cycles": per_tensor[CYCLES],
            "npuflow_per_tensor_weight_dram_bytes": per_tensor["weights_dram_bytes"],
            "npuflow_weight_dram_bytes": metrics["weights_dram_bytes"],
            "npuflow_tflite_cycles": shipped[CYCLES],
            "npuflow_tflite_weight_dram_bytes": shipped["weights_dram_bytes"],
            "npuflow_tflite_cpu_ops": shipped["cpu_ops"],
            "layers": [{"vela": v, "npuflow": o} for v, o in pairs]}


def _cell(layer: dict | None, key: str) -> str:
    return "-" if layer is None else f"{layer[key]:,}"


def markdown(results: list[dict]) -> str:
    lines = []
    for key, what in (("npuflow_tflite_cycles", "the int8 TFLite file as shipped "
                       "(`model=tflite`, its own quantization)"),
                      ("npuflow_cycles", "the float network as ONNX, quantized by npuflow")):
        ratios = [r[key] / r["vela_cycles"] for r in results]
        lines.append(f"npuflow on {what}: {sum(1 / 1.5 <= x <= 1.5 for x in ratios)} of "
                     f"{len(results)} network x target pairs within 1.5x, "
                     f"{sum(1 / 1.25 <= x <= 1.25 for x in ratios)} within 1.25x; ratio "
                     f"{min(ratios):.2f}-{max(ratios):.2f} (npuflow / Vela).")
    lines += ["", "| network | npuflow profile | Vela target | Vela cycles | npuflow, TFLite "
              "as shipped | ratio | npuflow, float ONNX quantized by npuflow | ratio "
              "| npuflow, per-tensor weights | ratio | npuflow ops on CPU |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['name']} | {r['profile']} | {r['accelerator']}, "
                     f"{r['system_config']} | {r['vela_cycles']:,} "
                     f"| {r['npuflow_tflite_cycles']:,} "
                     f"| {r['npuflow_tflite_cycles'] / r['vela_cycles']:.2f} "
                     f"| {r['npuflow_cycles']:,} "
                     f"| {r['npuflow_cycles'] / r['vela_cycles']:.2f} "
                     f"| {r['npuflow_per_tensor_cycles']:,} "
                     f"| {r['npuflow_per_tensor_cycles'] / r['vela_cycles']:.2f} "
                     f"| {r['npuflow_tflite_cpu_ops']} / {r['npuflow_cpu_ops']} |")
    lines += ["", "*TFLite as shipped* compiles the very file Vela compiles: its own int8 "
              "weights, scales and zero points (`model=tflite`, `quant=as_is`). *Float ONNX "
              "quantized by npuflow*: the float twin quantized per output channel by "
              "onnxruntime; *per-tensor weights* is that with `quant.per_channel=false`. Ops "
              "on CPU: TFLite path / float-ONNX path."]
    for r in (r for r in results if r["profile"] == TARGETS[0][0]):
        lines += ["", f"**{r['name']}** on {r['profile']}: Vela NPU {r['vela_npu_cycles']:,} "
                  f"cycles, off-chip flash {r['vela_flash_cycles']:,} cycles, total "
                  f"{r['vela_cycles']:,}.", "",
                  "| kind | Vela layer | MACs | Vela cycles | npuflow kernel | npuflow cycles "
                  "| ratio | npuflow bound |", "|---|---|---|---|---|---|---|---|"]
        for pair in r["layers"]:
            v, o = pair["vela"], pair["npuflow"]
            ratio = f"{o['cycles'] / v['cycles']:.2f}" if v and o and v["cycles"] else "-"
            kind = (v or o)["kind"]
            lines.append(f"| {kind} | {v['name'][:40] if v else '-'} | {_cell(v or o, 'macs')} "
                         f"| {_cell(v, 'cycles')} | {o['name'][:32] if o else '-'} "
                         f"| {_cell(o, 'cycles')} | {ratio} | {o['bound'] if o else '-'} |")
    lines += ["", "Per-layer cycles are each tool's own per-operator figure; the network totals "
              "are each tool's own schedule (Vela overlaps operators' weight fetches, npuflow's "
              "timeline overlaps independent branches), so layers need not sum to the total.",
              "", EXPLANATION]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--convert", action="store_true",
                        help="re-create the ONNX files from the float TFLite files")
    parser.add_argument("--only", nargs="*", default=[],
                        help="networks whose name contains one of these (a trial run)")
    args = parser.parse_args()
    chosen = [n for n in NETWORKS
              if not args.only or any(s.lower() in n[0].lower() for s in args.only)]
    if not chosen:
        parser.error(f"--only {' '.join(args.only)} matches none of: "
                     f"{'; '.join(n[0] for n in NETWORKS)}")
    vela = Vela.install()
    if args.convert:
        convert(vela.python)
    with tempfile.TemporaryDirectory() as tmp:
        results = [compare(name, int8, onnx_file, target, vela, Path(tmp))
                   for target in TARGETS for name, int8, _, onnx_file in chosen]
    text = markdown(results)
    write_result("vela_compare", text, results)
    print(text)


if __name__ == "__main__":
    main()
