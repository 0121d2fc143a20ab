"""compile/model.annotated.onnx: the compiled model with the plan's verdict on each node.

Netron shows a node's metadata properties beside its attributes, so a user who opens the
model sees, on the node itself, where it runs and why: ``npuflow.target``,
``npuflow.kernel`` (the fused kernel it belongs to), ``npuflow.cycles`` and
``npuflow.bound`` (the kernel's), ``npuflow.precision``, and for a node on the CPU the first
rule it failed (``npuflow.failed_rule``, the compile log's wording). The node's doc_string
repeats it in one line for viewers that show only that. Graph structure and weights are
untouched: the file runs in onnxruntime as the compiled model does.
"""

from __future__ import annotations

import onnx

from pipeline.compiler.plan import Plan

PREFIX = "npuflow."


def node_facts(plan: Plan) -> dict[str, dict[str, str]]:
    """ONNX node name -> the properties written on it."""
    out: dict[str, dict[str, str]] = {}
    for k in plan.kernels:
        c = k.cost
        failed = next((f"{r.text} ({r.detail})" if r.detail else r.text
                       for r in k.checks if not r.passed), "")
        for node in k.ops:
            facts = {"target": k.target, "kernel": k.name,
                     "cycles": str(c.total_cycles), "bound": c.bound,
                     "precision": k.precision, "unit": c.unit}
            if k.target == "cpu" and failed:
                facts["failed_rule"] = failed
            out[node] = facts
    return out


def annotate(model: onnx.ModelProto, plan: Plan) -> onnx.ModelProto:
    facts = node_facts(plan)
    for node in model.graph.node:
        mine = facts.get(node.name)
        if mine is None:  # Q/DQ nodes folded into their kernel's precision
            continue
        kept = [p for p in node.metadata_props if not p.key.startswith(PREFIX)]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
        for key, value in mine.items():
            node.metadata_props.add(key=PREFIX + key, value=value)
        why = f"; CPU because: {mine['failed_rule']}" if "failed_rule" in mine else ""
        node.doc_string = (f"npuflow: {mine['target']} in kernel {mine['kernel']}, "
                           f"{mine['cycles']} cycles, {mine['bound']}-bound{why}")
    return model
