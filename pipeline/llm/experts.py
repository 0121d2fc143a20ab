"""A decoder block's MLP: dense, or a mixture of experts built as the parts the phases count."""

from __future__ import annotations

import numpy as np

from pipeline.llm.spec import LlmSpec
from pipeline.llm.weights import Weights
from pipeline.zoo.builder import GraphBuilder


def mlp(g: GraphBuilder, spec: LlmSpec, x: str, m: dict[str, str], prefix: str = "") -> str:
    """down(act(gate(x)) * up(x)), or down(act(up(x))) without a gate."""
    act = g.silu if spec.activation == "silu" else g.gelu_erf
    gate = m.get(f"{prefix}gate")
    if gate is not None:
        hidden = g.mul(act(g.matmul(x, gate)), g.matmul(x, m[f"{prefix}up"]))
    else:
        hidden = act(g.matmul(x, m[f"{prefix}up"]))
    return g.matmul(hidden, m[f"{prefix}down"])


def experts(g: GraphBuilder, w: Weights, spec: LlmSpec, xn: str) -> str:
    """A mixture of experts as its parts, each under a name of its own so the phases can
    count it as often as a layer runs it (``pipeline.llm.phases``):

    - ``<phase>.moe/``: the router (a MatMul to the experts' logits, their softmax, the top
      gate that weighs the routed output) and the shared experts, once per MoE layer;
    - ``<phase>.expert/``: one routed expert over the rows it takes
      (``spec.rows_per_expert``: a prompt's tokens x k spread over the experts they touch;
      one row in a decode step), run once per expert a pass touches; the others are the
      same kernel on other weights;
    - ``<phase>.dense/``: the dense MLP of the layers that keep one (an output of its own).
    """
    phase, m = g.prefix.rstrip("/"), w.matrices
    seq = g.shape[xn][1]
    g.prefix = f"{phase}.moe/"
    logits = g.softmax(g.matmul(xn, m["router_"]), axis=-1)
    gate = g._node("ReduceMax", [logits, g.const("axes", np.array([-1], np.int64))],
                   (*g.shape[logits][:-1], 1), keepdims=1)
    shared = mlp(g, spec, xn, m, "shared_") if spec.shared_expert_size else None
    g.prefix = f"{phase}.expert/"
    rows = spec.rows_per_expert(seq)
    taken = xn
    if seq > 1:  # the rows one expert takes (which ones does not change the cost)
        taken = g._node("Slice", [xn, *(g.const(n, np.array([v], np.int64)) for n, v in
                                         (("starts", 0), ("ends", rows), ("axes", 1)))],
                        (1, rows, spec.hidden_size))
    routed = mlp(g, spec, taken, m, "expert_")
    if seq > 1:  # back in place among the prompt's rows
        pads = g.const("pads", np.array([0, 0, 0, 0, seq - rows, 0], np.int64))
        routed = g._node("Pad", [routed, pads], (1, seq, spec.hidden_size))
    g.prefix = f"{phase}.moe/"
    out = g.mul(routed, gate)
    if shared:
        out = g.add(out, shared)
    if spec.dense_layers:
        g.prefix = f"{phase}.dense/"
        g.output(mlp(g, spec, xn, m))
    g.prefix = f"{phase}/"
    return out
