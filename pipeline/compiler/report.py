"""The compile log, in the form the seeds show, and the summary a user reads first.

    [INFO] Kernel 'conv_12' (Conv+BatchNormalization+Relu) [fused: epilogue]:
      - Input layout: NHWC, dtype: int8 - Weight layout: OHWI, dtype: int8
      - Candidate targets: NPU_CONV, CPU_CONV
      - NPU_CONV constraints check: Kernel ... at most 15 (kernel 3x3): PASS; ...
      - Selected target: NPU_CONV - Estimated cycles: 1240
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from pipeline.compiler.plan import Kernel, Plan, Transfer
from pipeline.reports.terminal import CONSOLE


def _unit(kernel: Kernel, target: str) -> str:
    return f"{target.upper()}_{kernel.family.upper()}"


def kernel_entry(k: Kernel, transfers: list[Transfer]) -> list[str]:
    ops = "+".join(k.op_types)
    fused = f" [fused: {k.pattern}]" if len(k.ops) > 1 else ""
    npu, cpu = _unit(k, "npu"), _unit(k, "cpu")
    weight = f"dtype: {k.precision}" if k.gemm else "none"
    lines = [
        f"[INFO] Kernel '{k.name}' ({k.composite or ops}){fused}:",
        f"  - Input layout: {k.layout}, dtype: {k.precision} - Weights: {weight}",
        f"  - Candidate targets: {npu}, {cpu}",
        f"  - {npu} constraints check: " + "; ".join(
            f"{c.text} ({c.detail}): {'PASS' if c.passed else 'FAIL'}"
            for c in k.checks),
    ]
    if k.fused_form_failed:
        failed = "; ".join(f"{c.text} ({c.detail}): FAIL"
                           for c in k.fused_failed_checks)
        lines.append(f"  - Fused form {k.fused_form} constraints check: {failed}")
        lines.append("  - NOTE: falling back to the unfused ops, each placed on its own")
    chosen = npu if k.target == "npu" else cpu
    if k.moved_by_optimizer:
        lines.append(f"  - NOTE: moved to {k.target.upper()} by placement=optimal "
                     "(cheaper than the transfers around it)")
    mine = [t for t in transfers if t.to == k.id or t.source == k.id]
    for t in mine:
        if t.layout_conversion:
            lines.append(f"  - WARNING: layout conversion required ({t.layout_conversion})"
                         f" for '{t.tensor}', {t.bytes:,} bytes, {t.cycles:,} cycles")
    extra = sum(t.cycles for t in mine if t.to == k.id)
    suffix = f" (+{extra:,} for data transfer)" if extra else ""
    lines.append(f"  - Selected target: {chosen} - Estimated cycles: "
                 f"{k.cost.total_cycles:,}{suffix}")
    return lines


def compile_log(plan: Plan) -> str:
    lines = [f"npuflow compile log: graph '{plan.graph}' on '{plan.profile}', "
             f"placement={plan.placement.mode}, plan {plan.version}"]
    for k in plan.kernels:
        lines += kernel_entry(k, plan.transfers)
    mem = plan.memory
    lines += [
        f"[INFO] Memory: SRAM arena peak {mem.sram_arena_peak_bytes:,} of "
        f"{mem.activation_budget_bytes:,} activation bytes (live peak "
        f"{mem.sram_live_peak_bytes:,}); weights {mem.weights} "
        f"({mem.weight_bytes:,} bytes); DRAM arena {mem.dram_arena_peak_bytes:,} bytes",
    ]
    if mem.spilled_to_dram:
        lines.append(f"[WARNING] {len(mem.spilled_to_dram)} NPU tensors spilled to DRAM: "
                     + ", ".join(mem.spilled_to_dram[:10]))
    headroom = 1 - mem.sram_arena_peak_bytes / max(mem.activation_budget_bytes, 1)
    if headroom < 0.2:
        lines.append(f"[WARNING] SRAM headroom {100 * headroom:.0f}% (< 20%): compile-time "
                     "estimates are optimistic; keep 20-30% spare")
    return "\n".join(lines) + "\n"


def fallback_summary(plan: Plan) -> dict[str, Any]:
    cpu = [k for k in plan.kernels if k.target == "cpu"]
    reasons: Counter[str] = Counter()
    for k in cpu:
        failed = [c for c in k.checks if not c.passed]
        why = f"{failed[0].text} ({failed[0].detail})" if failed else "placement=optimal"
        reasons[why] += 1
    return {"cpu_kernels": [k.label for k in cpu], "reasons": dict(reasons)}


def print_summary(plan: Plan, console: Console | None = None) -> None:
    console = console or CONSOLE
    if console.quiet:  # a sweep job: rich would lay the tables out only to drop them
        return
    table = Table(title=f"compile: {plan.graph} on {plan.profile}")
    for col in ("target", "kernels", "ops", "est. cycles"):
        table.add_column(col, justify="right" if col != "target" else "left")
    for target in ("npu", "cpu"):
        ks = [k for k in plan.kernels if k.target == target]
        table.add_row(target, str(len(ks)), str(sum(len(k.ops) for k in ks)),
                      f"{sum(k.cost.total_cycles for k in ks):,}")
    console.print(table)
    reasons = fallback_summary(plan)["reasons"]
    if reasons:
        why = Table(title="CPU fallback: why")
        why.add_column("rule that failed")
        why.add_column("kernels", justify="right")
        for text, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            why.add_row(text, str(n))
        console.print(why)
