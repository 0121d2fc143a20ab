"""Fusion: group graph nodes into kernels (one launch each).

Why fuse: a fused epilogue keeps intermediates in SRAM (no DRAM round trip) and saves a
dispatch per op (DOMAIN.md section 4). Patterns, each switchable in ``compile.fusion``:

- ``epilogue``: Conv / ConvTranspose / Gemm / MatMul followed by BatchNormalization, a
  constant bias or scale (Add/Mul/Sub/Div with a constant), and one activation;
- ``residual``: one Add of another activation after the anchor (ResNet shortcut);
- ``gelu`` / ``silu`` / ``hardswish``: the exporter subgraphs ``0.5*x*(1+erf(x/sqrt2))``,
  ``x*sigmoid(x)`` and ``x*clip(x+3, 0, 6)/6`` (or ``x*hardsigmoid(x)``) become one
  activation, checked against ``Gelu`` / ``Silu`` / ``HardSwish`` support (RKNN-Toolkit2
  2.5.0 does the same: its fuse_ops log lists ``replace_torch_hardswish2`` on PP-OCRv4);
- ``layernorm``: LayerNorm as exporters write it below opset 17 (ReduceMean, Sub, Pow,
  ReduceMean, Add, Sqrt, Div, then the scale and shift) becomes one normalisation, checked
  against ``LayerNormalization`` support (RKNN-Toolkit2 2.5.0's rk35xx builds of MobileSAM's
  encoder make each of its 22 such subgraphs one ``exNorm`` layer);
- ``elementwise``: chains of single-consumer elementwise / activation ops, on a profile
  whose vector unit runs a chain in one pass (``vector_unit.chains``); otherwise an
  elementwise op takes along only one activation its output stage applies;
- ``pool``: a MaxPool directly after an anchor's epilogue.

A node joins a kernel only if its input comes from the kernel and that input has no other
consumer (an intermediate needed elsewhere must be written out). Every kernel keeps its
member nodes, so placement can split it back into single-node kernels when the NPU cannot
run the fused form.

One file of ~460 lines: the fusion rules (epilogues, chains, Concat in place, LUT
activations) decide together which node joins which kernel; split, each would need the
others' state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ops.graph import Graph, Node

ANCHORS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
ACTIVATIONS = frozenset({"Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh",
                         "HardSigmoid", "HardSwish", "Gelu", "Elu", "Selu", "Softplus"})
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Relu", "Clip", "LeakyRelu", "Sigmoid",
                         "Tanh", "HardSigmoid", "HardSwish", "Erf", "Gelu", "Neg", "Abs",
                         "Sqrt", "Exp", "Max", "Min", "Pow"})
PATTERNS = ("epilogue", "residual", "gelu", "silu", "hardswish", "layernorm", "elementwise",
            "pool")


@dataclass
class Kernel:
    name: str
    nodes: list[Node]
    pattern: str  # single | epilogue | elementwise | gelu | silu | hardswish | layernorm
    composite: str | None = None  # the op the fused pattern is checked as (Gelu, ...)
    folded: set[str] = field(default_factory=set)  # BN / const bias nodes folded into weights
    activation_nodes: set[str] = field(default_factory=set)  # its output stage's activation
    inputs: list[str] = field(default_factory=list)  # activation tensors read from outside
    outputs: list[str] = field(default_factory=list)  # tensors used outside the kernel

    @property
    def anchor(self) -> Node:
        return self.nodes[0]

    @property
    def op_types(self) -> list[str]:
        return [n.op_type for n in self.nodes]

    @property
    def label(self) -> str:
        """What a person reads: the node name when it names the anchor's op, else the op
        type first (an exporter may name a Reshape ``add_1_out`` after a tensor it
        reshapes). ``name`` stays the identifier that tiling overrides and the replay use."""
        return kernel_label(self.name, self.anchor.op_type)

    @property
    def activation(self) -> str | None:
        """The activation the anchor's output stage applies: an op type, or Silu /
        HardSwish for an exporter's subgraph; None if there is none."""
        nodes = [n for n in self.nodes if n.name in self.activation_nodes]
        if len(nodes) <= 1:
            return nodes[0].op_type if nodes else None
        types = {n.op_type for n in nodes}
        return "Silu" if "Sigmoid" in types else "Gelu" if "Erf" in types else "HardSwish"


def _squeezed(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def kernel_label(name: str, op_type: str) -> str:
    """``name`` if it already says ``op_type`` (case and separators ignored), else
    ``"{op_type} {name}"``."""
    return name if _squeezed(op_type) in _squeezed(name) else f"{op_type} {name}"


def _const_operand(node: Node, graph: Graph, inside: str) -> bool:
    others = [i for i in node.inputs if i and i != inside]
    return bool(others) and all(graph.tensors[i].is_const for i in others)


def _match_gelu(node: Node, graph: Graph, cons: Mapping[str, list[Node]]
                ) -> list[Node] | None:
    """Div(x, sqrt2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5), in either Mul order."""
    if node.op_type != "Div" or not _const_operand(node, graph, node.inputs[0]):
        return None
    x = node.inputs[0]
    chain = [node]
    for op in ("Erf", "Add", "Mul", "Mul"):
        users = cons.get(chain[-1].outputs[0], [])
        if len(users) != 1 or users[0].op_type != op:
            return None
        chain.append(users[0])
    first_mul = chain[3]
    if x not in first_mul.inputs and x not in chain[4].inputs:
        return None
    return chain


def _match_layernorm(node: Node, graph: Graph, cons: Mapping[str, list[Node]]
                     ) -> list[Node] | None:
    """From its first ReduceMean: ``d = x - mean(x)``, ``d / sqrt(mean(d^2) + eps)`` (the
    square a Pow by 2 or ``d * d``; ``d`` perhaps transposed), then a constant scale and
    shift if present."""
    def sole(n: Node) -> Node | None:
        users = cons.get(n.outputs[0], [])
        return users[0] if len(users) == 1 and n.outputs[0] not in graph.outputs else None

    if node.op_type != "ReduceMean" or not node.inputs:
        return None
    x = node.inputs[0]
    sub = sole(node)
    if sub is None or sub.op_type != "Sub" or sub.inputs[:2] != [x, node.outputs[0]]:
        return None
    chain = [node, sub]
    d = sub.outputs[0]
    if (moved := sole(sub)) is not None and moved.op_type == "Transpose":
        # a layout change the optimizer sank into the norm (a window partition): the norm
        # still reads and writes its tensor once
        chain.append(moved)
        d = moved.outputs[0]
    users = cons.get(d, [])
    def squares(u: Node) -> bool:
        if u.op_type == "Pow":
            return u.inputs[0] == d and _scalar_value(graph, u.inputs[1]) == 2.0
        return u.op_type == "Mul" and u.inputs[:2] == [d, d]

    square = next((u for u in users if squares(u)), None)
    div = next((u for u in users if u.op_type == "Div" and u.inputs[0] == d), None)
    if square is None or div is None or len(users) != 2 or d in graph.outputs:
        return None
    chain.append(square)
    for op in ("ReduceMean", "Add", "Sqrt"):
        nxt = sole(chain[-1])
        if nxt is None or nxt.op_type != op or \
                (op == "Add" and not _const_operand(nxt, graph, chain[-1].outputs[0])):
            return None
        chain.append(nxt)
    if sole(chain[-1]) is not div or div.inputs[1] != chain[-1].outputs[0]:
        return None
    chain.append(div)
    for op in ("Mul", "Add"):  # the learned scale and shift
        nxt = sole(chain[-1])
        if nxt is None or nxt.op_type != op or \
                not _const_operand(nxt, graph, chain[-1].outputs[0]):
            break
        chain.append(nxt)
    return chain


def _match_silu(node: Node, cons: Mapping[str, list[Node]]) -> list[Node] | None:
    """Sigmoid(x) -> Mul(x, .) where x feeds both."""
    if node.op_type != "Sigmoid":
        return None
    users = cons.get(node.outputs[0], [])
    if len(users) == 1 and users[0].op_type == "Mul" and node.inputs[0] in users[0].inputs:
        return [node, users[0]]
    return None


def _scalar_value(graph: Graph, name: str) -> float | None:
    """A constant scalar operand's value, dequantized where Q/DQ folding left it int8."""
    t = graph.tensor(name) if name else None
    data = t.real_value() if t is not None and t.is_const else None
    return float(data.reshape(-1)[0]) if data is not None and data.size == 1 else None


def _times_scalar(node: Node | None, graph: Graph, inside: str, value: float,
                  ops: tuple[str, ...]) -> bool:
    """``node`` is ``inside`` (op) a constant scalar close to ``value`` (int8 rounding)."""
    if node is None or node.op_type not in ops:
        return False
    other = [i for i in node.inputs if i and i != inside]
    v = _scalar_value(graph, other[0]) if len(other) == 1 else None
    return v is not None and abs(v - value) <= 0.02 * abs(value)


def _over_six(node: Node | None, graph: Graph, inside: str) -> bool:
    return _times_scalar(node, graph, inside, 6.0, ("Div",)) or \
        _times_scalar(node, graph, inside, 1 / 6, ("Mul",))


def _match_hardswish(node: Node, graph: Graph, cons: Mapping[str, list[Node]]
                     ) -> list[Node] | None:
    """HardSwish as exporters write it, from its first op: x*hardsigmoid(x) (alpha 1/6,
    beta 1/2), or x*clip(x+3, 0, 6)/6 with the division before or after the product. The
    Clip may be missing: onnxruntime's QDQ quantizer drops a Clip whose int8 output range
    already enforces it."""
    def sole(n: Node | None) -> Node | None:
        users = cons.get(n.outputs[0], []) if n is not None else []
        return users[0] if len(users) == 1 else None

    def times_x(n: Node | None, x: str) -> bool:
        return n is not None and n.op_type == "Mul" and x in n.inputs

    if node.op_type == "HardSigmoid":
        alpha, beta = float(node.attrs.get("alpha", 0.2)), float(node.attrs.get("beta", 0.5))
        mul = sole(node)
        ok = abs(alpha - 1 / 6) < 1e-4 and abs(beta - 0.5) < 1e-4 and times_x(mul, node.inputs[0])
        return [node, mul] if ok else None
    x = next((i for i in node.inputs if i and not graph.tensors[i].is_const), "")
    if not _times_scalar(node, graph, x, 3.0, ("Add",)):
        return None
    chain, nxt = [node], sole(node)
    if nxt is not None and nxt.op_type == "Clip":
        low, high = ([_scalar_value(graph, i) for i in nxt.inputs[1:3]] + [None, None])[:2]
        if low is None or high is None or abs(low) > 0.05 or abs(high - 6) > 0.1:
            return None
        chain.append(nxt)
        nxt = sole(nxt)
    after = sole(nxt)
    if (times_x(nxt, x) and _over_six(after, graph, nxt.outputs[0])) or \
            (_over_six(nxt, graph, chain[-1].outputs[0]) and times_x(after, x)):
        return [*chain, nxt, after]
    return None


def _sole_user(tensor: str, cons: Mapping[str, list[Node]], graph: Graph) -> Node | None:
    users = cons.get(tensor, [])
    if len(users) != 1 or tensor in graph.outputs:
        return None
    return users[0]


def _finish(kernel: Kernel, graph: Graph, cons: Mapping[str, list[Node]]) -> Kernel:
    produced = {o for n in kernel.nodes for o in n.outputs}
    member = {n.name for n in kernel.nodes}
    kernel.inputs = list(dict.fromkeys(
        i for n in kernel.nodes for i in n.inputs
        if i and i not in produced and not graph.tensors[i].is_const))
    kernel.outputs = [o for o in produced
                      if o in graph.outputs or any(u.name not in member
                                                   for u in cons.get(o, []))]
    return kernel


def fuse(graph: Graph, enabled: Mapping[str, bool],
         epilogue_activations: frozenset[str] = ACTIVATIONS | {"Silu"},
         vector_chains: bool = True, lut_activations: frozenset[str] = frozenset()
         ) -> list[Kernel]:
    """Kernels in topological order; ``enabled`` maps pattern name -> on/off;
    ``epilogue_activations`` are the activations an output stage applies (the profile's
    ``epilogue.activations``); any other stays a kernel of its own. ``lut_activations``
    (``epilogue.lut_activations``) fuse into an anchor too, through its lookup table, but
    do not ride along an elementwise pass. ``vector_chains``: the vector unit runs a chain
    of elementwise ops as one pass (``vector_unit.chains``)."""
    cons = graph.consumers()
    order = _Order(_depths(graph), graph.producers())
    taken: set[str] = set()
    kernels: list[Kernel] = []

    def grab(nodes: list[Node], pattern: str, composite: str | None = None) -> None:
        taken.update(n.name for n in nodes)
        kernels.append(_finish(Kernel(nodes[0].name, nodes, pattern, composite), graph, cons))

    for node in graph.nodes:
        if node.name in taken:
            continue
        if enabled.get("gelu") and (chain := _match_gelu(node, graph, cons)):
            grab(chain, "gelu", "Gelu")
            continue
        if enabled.get("layernorm") and (chain := _match_layernorm(node, graph, cons)):
            grab(chain, "layernorm", "LayerNormalization")
            continue
        if enabled.get("silu") and (chain := _match_silu(node, cons)):
            grab(chain, "silu", "Silu")
            continue
        if enabled.get("hardswish") and (chain := _match_hardswish(node, graph, cons)):
            grab(chain, "hardswish", "HardSwish")
            continue
        if node.op_type in ANCHORS and enabled.get("epilogue"):
            chain, folded, act_nodes = _epilogue(node, graph, cons, enabled, taken,
                                                 epilogue_activations | lut_activations,
                                                 order)
            grab(chain, "epilogue")
            kernel = kernels[-1]
            kernel.folded, kernel.activation_nodes = folded, {n.name for n in act_nodes}
            continue
        if node.op_type in ELEMENTWISE and enabled.get("elementwise"):
            chain = [node]
            while (user := _sole_user(chain[-1].outputs[0], cons, graph)) is not None \
                    and user.op_type in ELEMENTWISE and user.name not in taken \
                    and not _match_gelu(user, graph, cons) \
                    and not _match_hardswish(user, graph, cons) \
                    and (vector_chains or (len(chain) == 1 and user.op_type in ACTIVATIONS
                                           and user.op_type in epilogue_activations)):
                chain.append(user)
            grab(chain, "elementwise" if len(chain) > 1 else "single")
            continue
        grab([node], "single")
    return toposort(kernels)


def toposort(kernels: list[Kernel]) -> list[Kernel]:
    """Dependency order, earliest anchor first among the ready (Kahn's algorithm). Needed
    because a fused epilogue can read a tensor (a residual shortcut) that a node later in
    the ONNX order produces."""
    import heapq

    producer = {t: i for i, k in enumerate(kernels) for t in k.outputs}
    deps = [{producer[t] for t in k.inputs if t in producer} for k in kernels]
    users: dict[int, list[int]] = {}
    for i, ds in enumerate(deps):
        for d in ds:
            users.setdefault(d, []).append(i)
    waiting = [len(ds) for ds in deps]
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(kernels[i])
        for u in users.get(i, []):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(kernels):
        raise ValueError("fusion produced a cycle between kernels")
    return order


def _composite_activation(users: list[Node], graph: Graph, cons: Mapping[str, list[Node]],
                          enabled: Mapping[str, bool], free: frozenset[str], taken: set[str]
                          ) -> list[Node] | None:
    """A SiLU, HardSwish or GELU subgraph that every reader of the epilogue's tensor
    belongs to, when the output stage applies it (``free``) and its pattern is on (RKNN's
    rk35xx builds fuse each into the convolution before it: ConvSilu, ConvExGelu)."""
    names = {u.name for u in users}
    for user in users:
        for pattern, op in (("silu", "Silu"), ("hardswish", "HardSwish"), ("gelu", "Gelu")):
            if not enabled.get(pattern) or op not in free:
                continue
            nodes = _match_silu(user, cons) if pattern == "silu" else \
                _match_gelu(user, graph, cons) if pattern == "gelu" else \
                _match_hardswish(user, graph, cons)
            if nodes and names <= {n.name for n in nodes} and \
                    not any(n.name in taken for n in nodes):
                return nodes
    return None


def _depths(graph: Graph) -> dict[str, int]:
    """Each tensor's longest path from the graph's inputs, in nodes (inputs and constants
    0): a property of the graph, not of the order its nodes are listed in."""
    depth: dict[str, int] = {}
    for node in graph.nodes:  # ONNX lists nodes in a topological order
        level = 1 + max((depth.get(t, 0) for t in node.inputs if t), default=0)
        depth.update({t: level for t in node.outputs})
    return depth


def _folds(node: Node, graph: Graph, inside: str) -> bool:
    """Whether ``node`` folds into the weights and bias of the anchor whose output
    ``inside`` it reads: a BatchNorm, or arithmetic with a constant."""
    return node.op_type == "BatchNormalization" or (
        node.op_type in ("Add", "Sub", "Mul", "Div") and _const_operand(node, graph, inside))


@dataclass(frozen=True)
class _Order:
    """What residual fusion asks of the graph's structure: each tensor's depth and
    producer."""

    depth: Mapping[str, int]
    producers: Mapping[str, Node]


def _anchored(tensor: str, graph: Graph, cons: Mapping[str, list[Node]],
              producers: Mapping[str, Node]) -> bool:
    """Whether ``tensor`` ends an anchor's epilogue (a Conv/Gemm followed only by folded
    BatchNorms, constant arithmetic or activations, each the sole user of the last)."""
    while (node := producers.get(tensor)) is not None and len(cons.get(tensor, [])) == 1:
        if node.op_type in ANCHORS:
            return True
        if not (_folds(node, graph, node.inputs[0]) or node.op_type in ACTIVATIONS):
            return False
        tensor = node.inputs[0]
    return False


def _takes_residual(add: Node, inside: str, graph: Graph, cons: Mapping[str, list[Node]],
                    order: _Order) -> bool:
    """Whether the branch ending in ``inside`` absorbs the residual ``add``. When both
    operands end an anchor's epilogue, the deeper one does (the main path; the shortcut is
    the one read in), the larger name on a tie: decided by the graph, so two listings of
    the same network fuse alike (a re-exported file lists a block's shortcut conv first)."""
    other = next((t for t in add.inputs if t and t != inside), inside)
    if other == inside or not _anchored(other, graph, cons, order.producers):
        return True
    return (order.depth.get(inside, 0), inside) >= (order.depth.get(other, 0), other)


def _epilogue(anchor: Node, graph: Graph, cons: Mapping[str, list[Node]],
              enabled: Mapping[str, bool], taken: set[str], free: frozenset[str],
              order: _Order) -> tuple[list[Node], set[str], list[Node]]:
    """The anchor's epilogue, the names of nodes folded into its weights and bias, and the
    nodes of the activation it applies (one, or an exporter's SiLU / HardSwish)."""
    chain = [anchor]
    folded: set[str] = set()
    residual = False
    activation: list[Node] = []
    while True:
        inside = chain[-1].outputs[0]
        users = [] if inside in graph.outputs else cons.get(inside, [])
        if not activation and len(users) >= 2 and \
                (composite := _composite_activation(users, graph, cons, enabled, free, taken)):
            chain.extend(composite)
            activation = composite
            continue
        if len(users) != 1 or users[0].name in taken:
            break
        user, op = users[0], users[0].op_type
        if _folds(user, graph, inside) and not activation and not residual:
            chain.append(user)
            folded.add(user.name)
        elif op == "Add" and enabled.get("residual") and not residual \
                and _takes_residual(user, inside, graph, cons, order):
            chain.append(user)
            residual = True
        elif op in ACTIVATIONS and op in free and not activation:
            chain.append(user)
            activation = [user]
        elif op == "MaxPool" and enabled.get("pool"):
            chain.append(user)
            break
        elif op == "Reshape" and not activation:
            # a view of the result (a 3-D Linear's Gemm back to its tokens): the activation
            # after it still reads the output stage, as RKNN's ConvExGelu does
            chain.append(user)
        else:
            break
    while chain[-1].op_type == "Reshape":  # a view nothing fused after stays its own kernel
        chain.pop()
    return chain, folded, activation


def split(kernel: Kernel, graph: Graph) -> list[Kernel]:
    """The kernel's nodes as single-node kernels (fallback when the fused form fails)."""
    cons = graph.consumers()
    return [_finish(Kernel(n.name, [n], "single"), graph, cons) for n in kernel.nodes]
