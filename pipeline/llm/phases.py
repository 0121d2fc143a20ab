"""Time to first token, tokens per second and memory of a language model, from its compiled
phases (``pipeline.llm.graph``) on the profile.

Each phase's block is replayed alone on the profile's resources (``simulator.replay``:
the plan's kernel costs, the hand-overs between NPU and host where placement split it)
and scheduled; its makespan is one layer's time. The block's inputs and outputs are left
out: between layers the hidden state and the cache stay in the device's DRAM, written by
one layer and read by the next, and that traffic is already in the kernels' DRAM bytes.

- Prefill (time to first token): ``layers x block(prefill) + head + sampling``. The head
  is ``chunks x`` one column block (``spec.lm_head_chunks``), for the last position only.
- Decode step at context ``T`` (``prompt + 1 .. prompt + new``): ``layers x block(T) +
  head + sampling``. ``block(T)`` is exact at the two compiled contexts and linear between
  them: what grows with ``T`` is the attention (the score and value MatMuls, the Softmax,
  the cache read), each linear in ``T`` up to tile rounding. A sliding-window layer
  attends over ``min(T, window)`` positions: its block is ``block(min(T, window))`` (the
  same line, below the compiled contexts where the window is shorter than the prompt).
  The prefill is priced with full causal scores in every layer, as eager attention with a
  banded mask computes them.
- Sampling: the host reads the logits (``vocab x 4`` bytes) at its bandwidth
  (``hardware.host``).
- Memory: the weights as the plan holds them (``weight_storage``), the KV cache at fp16 for
  ``max_context`` positions (a sliding-window layer's for at most its window), the
  compiled plan's DRAM activation arena, and the host's embedding table. The runtime's own
  code and buffers are not modelled.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from hardware.host import host_seconds
from hardware.profile import HardwareProfile
from pipeline.compiler.plan import Kernel, Plan
from pipeline.llm.spec import LlmSpec
from pipeline.simulator.replay import frame_tasks
from pipeline.simulator.timeline import Task, schedule

BLOCK_PHASES = ("prefill", "decode_first", "decode_last")
# a mixture of experts' parts of a block (experts.experts): counted per MoE layer, per touched
# expert and per dense layer
MOE_PARTS = ("moe", "expert", "dense")
# the trace's process per phase (simulator.trace.RUNS)
TRACE_RUNS = {"prefill": "llm prefill block", "decode_first": "llm first decode block",
              "decode_last": "llm last decode block", "lm_head": "llm lm_head chunk",
              **{f"{p}.{part}": f"llm {p} {label}" for p in BLOCK_PHASES
                 for part, label in zip(MOE_PARTS, ("router and shared experts",
                                                    "one routed expert", "dense MLP"),
                                        strict=True)}}
MB = 1024 * 1024  # the MiB RKLLM's memory column and most tools report


def _io_conversion(kernel: Kernel, plan: Plan) -> bool:
    """A Cast or Identity at the graph's edge (fp16's converter keeps float32 I/O): the
    phases graph's own artefact, since between layers the hidden state stays in fp16."""
    edge = set(kernel.inputs) & set(plan.inputs) or set(kernel.outputs) & set(plan.outputs)
    return bool(edge) and set(kernel.op_types) <= {"Cast", "Identity"}


def phase_tasks(plan: Plan, profile: HardwareProfile, phase: str) -> tuple[list[Task], int]:
    """One phase's kernels and the hand-overs inside it, scheduled (graph I/O left out),
    and their makespan in cycles."""
    kernels = [k for k in plan.kernels
               if k.name.startswith(f"{phase}/") and not _io_conversion(k, plan)]
    ids = {k.id for k in kernels}
    kernels = [dataclasses.replace(k, deps=[d for d in k.deps if d in ids]) for k in kernels]
    transfers = [t for t in plan.transfers if t.source in ids and t.to in ids]
    sub = dataclasses.replace(plan, kernels=kernels, transfers=transfers)
    tasks, _ = frame_tasks(sub, profile, 0, 0, [])
    return tasks, schedule(tasks)


@dataclass(frozen=True)
class Precision:
    """What a weight costs to store under the run's quantization: the host's embedding
    table, which is not in the graph (the plan prices every other weight)."""

    bits: int  # per weight element
    group: int  # input rows per scale (0: one scale per output channel; -1: no scales)
    scale_bytes: int = 4  # onnxruntime writes float32 scales

    @classmethod
    def of(cls, quant: Any) -> Precision:
        scheme = str(quant.scheme)
        if scheme == "weight_only":
            return cls(int(quant.weight_bits), int(quant.group_size))
        if scheme in ("int8", "auto"):
            return cls(8, 0 if quant.per_channel else -1)
        return cls(16 if str(quant.get("float_precision", "fp16")) == "fp16" or
                   scheme == "fp16" else 32, -1)

    def matrix_bytes(self, rows: int, columns: int) -> int:
        data = math.ceil(rows * columns * self.bits / 8)
        if self.group < 0:
            return data
        groups = 1 if self.group == 0 else math.ceil(rows / self.group)
        return data + groups * columns * self.scale_bytes


def weight_storage(plan: Plan, spec: LlmSpec, chunks: int, precision: Precision
                   ) -> dict[str, int]:
    """Bytes of the weights as the device keeps them, read from the compiled plan (each
    kernel's ``weight_bytes``, the figure its cost streamed): one block's kernels (every
    phase reads the same weights; the first decode block's are counted) times the layers,
    with a mixture of experts' router and shared experts per MoE layer, its one routed
    expert times the experts per MoE layer and the dense MLP per dense layer; the LM head's
    matrix times its chunks, its norm once; and the embedding table the host looks tokens
    up in, at the precision (its own copy even when the head is tied: the NPU's head is
    laid out for the NPU)."""
    def held(part: str) -> int:
        return sum(k.weight_bytes for k in plan.kernels if k.name.startswith(f"{part}/"))

    moe_layers = spec.num_layers - spec.dense_layers if spec.num_experts else 0
    layers = spec.num_layers * held("decode_first") + spec.dense_layers * \
        held("decode_first.dense") + moe_layers * (held("decode_first.moe") +
                                                   spec.num_experts * held("decode_first.expert"))
    head = [k for k in plan.kernels if k.name.startswith("lm_head/")]
    return {"layers": layers,
            "lm_head": chunks * sum(k.weight_bytes for k in head if k.gemm is not None),
            "final_norm": sum(k.weight_bytes for k in head if k.gemm is None),
            "embedding": precision.matrix_bytes(spec.hidden_size, spec.vocab_size)}


def estimate(plan: Plan, profile: HardwareProfile, spec: LlmSpec, prompt: int, new: int,
             chunks: int, precision: Precision, max_context: int | None
             ) -> tuple[dict[str, Any], dict[str, list[Task]]]:
    """The language-model metrics and the per-phase breakdown (``llm.json``), and each
    phase's scheduled tasks for the trace."""
    hz = profile.frequency_mhz * 1e6
    parts = [f"{p}.{part}" for p in BLOCK_PHASES for part in MOE_PARTS]
    scheduled = {p: phase_tasks(plan, profile, p)
                 for p in (*BLOCK_PHASES, "lm_head", *parts)}
    tasks = {p: t for p, (t, _) in scheduled.items() if t}
    moe_layers = spec.num_layers - spec.dense_layers if spec.num_experts else 0
    touched = {p: spec.experts_touched(prompt if p == "prefill" else 1) if moe_layers else 0
               for p in BLOCK_PHASES}
    # what a layer adds to its attention block: a mixture of experts' router, shared experts
    # and touched routed experts per MoE layer, the dense MLP per dense layer
    mlp = {p: moe_layers * (scheduled[f"{p}.moe"][1] + touched[p] * scheduled[f"{p}.expert"][1])
           + spec.dense_layers * scheduled[f"{p}.dense"][1] for p in BLOCK_PHASES}
    block = {p: scheduled[p][1] for p in BLOCK_PHASES}
    head = chunks * scheduled["lm_head"][1]
    sampling = math.ceil(host_seconds(spec.vocab_size, 4 * spec.vocab_size, profile.host) * hz)
    first, last = block["decode_first"], block["decode_last"]

    def block_at(context: int) -> float:  # linear between the two compiled contexts
        return max(first + (last - first) * (context - prompt - 1) / max(new - 1, 1), 0.0)

    full = spec.num_layers - spec.local_layers
    window = spec.sliding_window or prompt + new
    steps = [full * block_at(t) + spec.local_layers * block_at(min(t, window)) +
             mlp["decode_first"] + head + sampling for t in range(prompt + 1, prompt + new + 1)]
    prefill = spec.num_layers * block["prefill"] + mlp["prefill"] + head + sampling
    ttft_s = prefill / hz
    decode_s = sum(steps) / hz
    context = max_context or prompt + new
    storage = weight_storage(plan, spec, chunks, precision)
    kv = spec.kv_bytes_per_token() * spec.kv_positions(context) // spec.num_layers
    memory = {"weights": sum(storage.values()), "kv_cache": kv,
              "activations": plan.memory.dram_arena_peak_bytes}
    metrics = {
        "ttft_ms": ttft_s * 1e3,
        "prefill_tokens_per_s": prompt / ttft_s,
        "decode_tokens_per_s": new / decode_s,
        "decode_ms_per_token": decode_s * 1e3 / new,
        "memory_mb": sum(memory.values()) / MB,
        **{f"memory_{k}_mb": v / MB for k, v in memory.items()},
    }
    ms = 1e3 / hz
    breakdown = {
        "prompt_tokens": prompt, "new_tokens": new, "layers": spec.num_layers,
        "kv_context": context, "sliding_window": spec.sliding_window,
        "local_layers": spec.local_layers, "precision": dataclasses.asdict(precision),
        "block_ms": {p: block[p] * ms for p in BLOCK_PHASES},
        **({"experts": {"touched": touched, "rows_per_expert": {
            p: spec.rows_per_expert(prompt if p == "prefill" else 1) for p in BLOCK_PHASES},
            "moe_layers": moe_layers, "dense_layers": spec.dense_layers,
            "mlp_ms": {p: mlp[p] * ms for p in BLOCK_PHASES}}} if moe_layers else {}),
        "lm_head_ms": head * ms, "lm_head_chunks": chunks, "sampling_ms": sampling * ms,
        "prefill_ms": {"layers": (spec.num_layers * block["prefill"] + mlp["prefill"]) * ms,
                       "lm_head": head * ms, "sampling": sampling * ms},
        "decode_step_ms": [s * ms for s in steps],
        "memory_bytes": {**{f"weights.{k}": v for k, v in storage.items()},
                         "kv_cache": kv, "activations": memory["activations"]},
    }
    return {"metrics": metrics, "breakdown": breakdown}, tasks


def summary_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(figure, value, how it is made up) for the console: the answer a language-model run
    gives, each figure with the parts ``estimate`` adds up to it."""
    m, b = result["metrics"], result["breakdown"]
    pre, steps, mem = b["prefill_ms"], b["decode_step_ms"], b["memory_bytes"]
    weights = sum(v for k, v in mem.items() if k.startswith("weights.")) / MB
    window = (f"; {b['local_layers']} layers over a {b['sliding_window']}-position window"
              if b["local_layers"] else "")
    experts = b.get("experts")
    moe = (f" + experts {experts['mlp_ms']['prefill']:.2f} ({experts['touched']['prefill']:.1f}"
           " touched a layer)" if experts else "")
    return [
        ("time to first token", f"{m['ttft_ms']:,.1f} ms",
         f"{b['layers']} layers x {b['block_ms']['prefill']:.2f} ms (prefill block, "
         f"{b['prompt_tokens']} positions){moe} + LM head {pre['lm_head']:.2f} + sampling "
         f"{pre['sampling']:.2f}"),
        ("prefill", f"{m['prefill_tokens_per_s']:,.0f} tokens/s",
         f"{b['prompt_tokens']} prompt tokens / TTFT"),
        ("decode", f"{m['decode_tokens_per_s']:,.2f} tokens/s",
         f"{b['new_tokens']} steps, {steps[0]:.2f} ms at context {b['prompt_tokens'] + 1} "
         f"to {steps[-1]:.2f} ms at {b['prompt_tokens'] + b['new_tokens']}{window}"),
        ("memory", f"{m['memory_mb']:,.1f} MB",
         f"weights {weights:,.1f} + KV cache {mem['kv_cache'] / MB:,.1f} "
         f"({b['kv_context']} positions, fp16) + activations {mem['activations'] / MB:,.1f}"),
    ]
