"""Digits classifier: fp32 vs fp16 vs int8 (three calibrations x per-tensor / per-channel).

    python benchmarks/quant_digits.py

Top-1 on the 450-sample held-out split, every number from onnxruntime running the real
(quantized) model; writes results/quant_digits.md.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from _common import run_npuflow, write_result

CASES = [("fp32", ["quant=none"]), ("fp16", ["quant=fp16"])] + [
    (f"int8 {m} {'per-channel' if pc else 'per-tensor'}",
     ["quant=int8", f"quant.calibration.method={m}", f"quant.per_channel={str(pc).lower()}"])
    for m in ("minmax", "entropy", "percentile") for pc in (False, True)]


def main() -> None:
    lines = ["| scheme | top-1 | fp32 top-1 | top-1 agreement | output cosine | size bytes |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, overrides) in enumerate(CASES):
            run_npuflow(Path(tmp) / str(i), "model=digits_mlp", "data=digits",
                        "stages.order=[export,optimize,quantize]", *overrides)
            a = json.loads((Path(tmp) / str(i) / "quantize" / "accuracy.json").read_text())
            lines.append(f"| {label} | {100 * a['accuracy_top1']:.2f}% | "
                         f"{100 * a['accuracy_top1_float']:.2f}% | "
                         f"{100 * a['top1_agreement']:.2f}% | {a['output_cosine']:.6f} | "
                         f"{a['model_size_bytes']:,} |")
            print(lines[-1], flush=True)
    write_result("quant_digits", "\n".join(lines))


if __name__ == "__main__":
    main()
