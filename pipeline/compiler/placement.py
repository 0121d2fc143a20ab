"""Placement: each kernel on the NPU or the fallback CPU, with the checks that decided it.

``greedy`` puts every kernel the NPU supports on the NPU. That can lose: a short NPU island
between CPU ops pays two transfers, two syncs and two layout conversions (the seeds
measured a 15% end-to-end gain from moving such an island to the CPU). ``optimal`` solves
the two-target assignment exactly as an s-t minimum cut (Stone, "Multiprocessor scheduling
with the aid of network flow algorithms", IEEE TSE 1977): cutting source->k costs k's CPU
time, k->sink its NPU time (infinite if unsupported), and each tensor edge between kernels
costs its transfer when its ends land on different sides. This is exact for a sequential
schedule with direction-independent transfer costs; a tensor read by several kernels on the
other side is charged per consumer (slightly pessimistic). networkx computes the cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hardware.cost import WIDTHS
from hardware.host import layout_conversion_seconds, link_seconds
from hardware.profile import PRECISIONS, HardwareProfile
from ops.constraints import CheckResult
from ops.conv_lowering import conv_lowering
from ops.graph import Graph, Node
from ops.support import check_node
from ops.work import Work
from pipeline.compiler.costing import cpu_cost, depthwise_kernel
from pipeline.compiler.fusion import Kernel, split
from pipeline.compiler.kernel_work import (
    aligned,
    concat_in_place,
    dilated,
    host_input,
    kernel_precision,
    kernel_work,
    lowered,
    mean_on_engine,
)

NPU, CPU = "npu", "cpu"
_INFEASIBLE = 1e18


@dataclass
class Decision:
    kernel: Kernel
    target: str
    precision: str
    work: Work
    checks: list[tuple[str, CheckResult]] = field(default_factory=list)  # (node, result)
    npu_cycles: float = math.inf  # the greedy plan's cost of it (inf: not NPU-able)
    cpu_cycles: float = 0.0
    fused_form_failed: bool = False
    fused_checks: list[tuple[str, CheckResult]] = field(default_factory=list)  # why it split
    fused_ops: str = ""  # the fused form that failed, e.g. "Gelu (div_1+erf_1+...)"
    moved_by_optimizer: bool = False
    depthwise: bool = False

    @property
    def npu_ok(self) -> bool:
        return all(r.passed for _, r in self.checks)

    @property
    def reasons(self) -> list[str]:
        return [f"{node}: {r.text} ({r.detail})" for node, r in self.checks if not r.passed]


def npu_precisions(profile: HardwareProfile) -> list[str]:
    return [p for p in PRECISIONS if getattr(profile.mac_array.throughput, p) > 0]


def _precision_check(precision: str, profile: HardwareProfile) -> CheckResult:
    ok = npu_precisions(profile)
    return CheckResult("precision", f"Precision must be one the NPU runs ({', '.join(ok)})",
                       precision in ok, f"dtype {precision}")


def check_kernel(kernel: Kernel, graph: Graph, profile: HardwareProfile, precision: str
                 ) -> list[tuple[str, CheckResult]]:
    results: list[tuple[str, CheckResult]] = []
    if kernel.composite:
        last = kernel.nodes[-1]
        node = Node(kernel.name, kernel.composite, kernel.inputs[:1], last.outputs[:1], {})
        results += [(kernel.name, r) for r in check_node(node, graph, profile.ops)[1]]
    else:
        for node in kernel.nodes:
            if node.name in kernel.folded:
                continue  # folded into the anchor's weights and bias: nothing to run
            results += [(node.name, r) for r in check_node(node, graph, profile.ops)[1]]
    results.append((kernel.name, _precision_check(precision, profile)))
    return results


def _estimate(d: Decision, profile: HardwareProfile) -> None:
    """The kernel's CPU price; its NPU price is the greedy plan's cost of it, which the
    compiler sets once the memory plan exists (``driver._place``)."""
    d.cpu_cycles = cpu_cost(d.work, d.precision, profile).total_cycles


def decide(kernels: list[Kernel], graph: Graph, profile: HardwareProfile,
           float_precision: str) -> list[Decision]:
    """Greedy decisions; a fused kernel the NPU cannot run is split into its nodes."""
    decisions: list[Decision] = []
    for kernel in kernels:
        precision = kernel_precision(kernel, graph, float_precision)
        checks = check_kernel(kernel, graph, profile, precision)
        if not all(r.passed for _, r in checks) and len(kernel.nodes) > 1:
            failed = [(n, r) for n, r in checks if not r.passed]
            form = f"{kernel.composite or '+'.join(kernel.op_types)} " \
                f"({'+'.join(n.name for n in kernel.nodes)})"
            for part in split(kernel, graph):
                d = _decision(part, graph, profile, float_precision, True)
                d.fused_checks, d.fused_ops = failed, form
                decisions.append(d)
            continue
        decisions.append(_decision(kernel, graph, profile, float_precision, False, checks))
    if profile.single_npu_segment:
        _one_segment(decisions)
    return decisions


def _one_segment(decisions: list[Decision]) -> None:
    """A compiler that maps one segment of the graph (``single_npu_segment``): the NPU's
    part takes only the graph's inputs, so a kernel that reads, directly or through others,
    what a host kernel wrote runs on the host too, supported or not, with a failed check
    naming that host kernel. Coral, "TensorFlow models on the Edge TPU": the compiler cannot
    partition the model more than once, so the first unsupported operation and everything
    after it run on the CPU. "After" is read as downstream: a branch that never reads the
    host's results (a second output head) stays on the NPU. Kernels come in topological
    order, so one pass sees every producer first."""
    on_host: dict[str, str] = {}  # tensor -> the host kernel upstream of it
    for d in decisions:
        upstream = next((on_host[t] for t in d.kernel.inputs if t in on_host), None)
        if d.npu_ok and upstream is not None:
            d.checks.append((d.kernel.name, CheckResult(
                "segment", "The NPU runs one segment: kernels downstream of a host kernel "
                "run on the host", False, f"after {upstream}")))
            d.target = CPU
        if not d.npu_ok:
            for t in d.kernel.outputs:
                on_host[t] = upstream or d.kernel.name


def _decision(kernel: Kernel, graph: Graph, profile: HardwareProfile, float_precision: str,
              from_split: bool, checks: list | None = None) -> Decision:
    precision = kernel_precision(kernel, graph, float_precision)
    checks = checks if checks is not None else check_kernel(kernel, graph, profile, precision)
    # the work as this NPU runs it: a wide dilation as a zero-dilated kernel, a large
    # kernel or stride as the compiler rewrote it, channels
    # padded to its multiple, a spatial mean on its depthwise engine, a concat in place
    work = kernel_work(kernel, graph, precision, frozenset(profile.epilogue.lut_activations))
    lowering = conv_lowering(kernel.anchor, graph, profile.ops.get(kernel.anchor.op_type) or {})
    work = lowered(dilated(work, kernel, graph, profile.mac_array.hardware_dilation), kernel,
                   graph, lowering)
    work = aligned(work, kernel, graph, profile.channel_alignment,
                   profile.mac_array.tap_channels, lowering, profile.mac_array.kernel_first_taps)
    work = mean_on_engine(work, kernel, graph, profile.mac_array.depthwise.spatial_means)
    work = concat_in_place(work, kernel, graph, profile.concat_in_place)
    work = host_input(work, kernel, graph)
    d = Decision(kernel, NPU, precision, work, checks, fused_form_failed=from_split,
                 depthwise=depthwise_kernel(kernel, graph, work))
    d.target = NPU if d.npu_ok else CPU
    _estimate(d, profile)
    return d




def needs_conversion(npu_layout: str, host_layout: str, rank: int) -> bool:
    """Feature maps of rank >= 3 are converted when the sides differ: the NPU keeps every
    activation in its native channels-last (blocked) layout, as RKNN and Vela do."""
    return npu_layout != host_layout and rank >= 3


def transfer_cycles(nbytes: int, profile: HardwareProfile, convert: bool) -> float:
    """One NPU <-> CPU hand-over: link transfer + sync, plus a layout conversion (a full
    read and write of the tensor on the host) when ``convert``."""
    seconds = link_seconds(nbytes, profile.link)
    if convert:
        seconds += layout_conversion_seconds(nbytes, profile.host.bandwidth_gbps)
    return seconds * profile.frequency_mhz * 1e6


def _rank(name: str, graph: Graph) -> int:
    return len(graph.tensors[name].shape or ())


def tensor_bytes(name: str, graph: Graph, precision: str) -> int:
    return graph.tensors[name].size * WIDTHS.get(precision, WIDTHS["fp32"])[0]


@dataclass(frozen=True)
class Net:
    """A tensor, the kernel that writes it and every reader (None: the host, for a graph
    input's writer and a graph output's reader). Crossing between NPU and host costs one
    hand-over per net and direction, however many readers sit on the far side: the plan
    (``driver._transfers``), the sequential estimate and the min-cut all charge it so."""
    tensor: str
    producer: int | None
    consumers: tuple[int | None, ...]


def nets(decisions: list[Decision], graph: Graph) -> list[Net]:
    producer = {t: i for i, d in enumerate(decisions) for t in d.kernel.outputs}
    readers: dict[str, list[int | None]] = {}
    for j, d in enumerate(decisions):
        for t in d.kernel.inputs:
            readers.setdefault(t, []).append(j)
    for t in graph.outputs:
        if t in producer:
            readers.setdefault(t, []).append(None)
    return [Net(t, producer.get(t), tuple(dict.fromkeys(r))) for t, r in readers.items()]


def hand_over_precision(net: Net, precisions: list[str], to_npu: bool) -> str:
    """The precision a hand-over moves, the NPU side's: to the host, its writer's; to the
    NPU, its first reader's (the host converts to what the NPU reads before sending)."""
    if not to_npu and net.producer is not None:
        return precisions[net.producer]
    return precisions[next(c for c in net.consumers if c is not None)]


@dataclass(frozen=True)
class HandOver:
    nbytes: int
    host_layout: str
    convert: bool
    cycles: float


def hand_over(tensor: str, graph: Graph, profile: HardwareProfile, precision: str
              ) -> HandOver:
    """One hand-over of ``tensor``: a graph input or output is converted to or from the
    application's layout (``graph.io_layout``), any other tensor to or from the host's."""
    graph_io = tensor in graph.inputs or tensor in graph.outputs
    host = graph.io_layout if graph_io else profile.host.layout
    convert = needs_conversion(profile.layout, host, _rank(tensor, graph))
    nbytes = tensor_bytes(tensor, graph, precision)
    return HandOver(nbytes, host, convert, transfer_cycles(nbytes, profile, convert))


def hand_over_cycles(tensor: str, graph: Graph, profile: HardwareProfile,
                     precision: str) -> float:
    return hand_over(tensor, graph, profile, precision).cycles


def _side(index: int | None, targets: list[str]) -> str:
    return CPU if index is None else targets[index]


def total_cycles(decisions: list[Decision], graph: Graph, profile: HardwareProfile,
                 targets: list[str]) -> float:
    """Sequential latency estimate of an assignment: kernels plus hand-overs (one per net
    that crosses)."""
    total = sum(d.npu_cycles if t == NPU else d.cpu_cycles
                for d, t in zip(decisions, targets, strict=True))
    precisions = [d.precision for d in decisions]
    for net in nets(decisions, graph):
        side = _side(net.producer, targets)
        if any(_side(c, targets) != side for c in net.consumers):
            total += hand_over_cycles(net.tensor, graph, profile,
                                      hand_over_precision(net, precisions, side == CPU))
    return total


def optimal_targets(decisions: list[Decision], graph: Graph, profile: HardwareProfile
                    ) -> list[str]:
    """The assignment of least ``total_cycles``: an s-t minimum cut (source: the NPU side)
    in which each net's hand-over is one gadget per direction, so that it is paid once
    however many readers cross (the exact cut of a hyperedge: Lawler, *Cutsets and
    partitions of hypergraphs*, Networks 3, 1973). NPU -> host: writer -> x (cost),
    x -> each reader (infinite). Host -> NPU: each reader -> y (infinite), y -> writer
    (cost). networkx is imported here: ~0.14 s that a run whose compile is restored from the
    cache does not pay."""
    import networkx as nx

    g = nx.DiGraph()
    for i, d in enumerate(decisions):
        g.add_edge("npu", i, capacity=float(d.cpu_cycles))
        g.add_edge(i, "cpu", capacity=float(d.npu_cycles) if d.npu_ok else _INFEASIBLE)
    precisions = [d.precision for d in decisions]
    for n, net in enumerate(nets(decisions, graph)):
        readers = [c for c in net.consumers if c is not None]
        writer = "cpu" if net.producer is None else net.producer
        if net.producer is not None:  # written on the NPU, read on the host
            x = ("to_host", n)
            g.add_edge(net.producer, x, capacity=hand_over_cycles(
                net.tensor, graph, profile, hand_over_precision(net, precisions, False)))
            for c in net.consumers:
                g.add_edge(x, "cpu" if c is None else c)  # no capacity: infinite
        if readers:  # written on the host, read on the NPU
            y = ("to_npu", n)
            g.add_edge(y, writer, capacity=hand_over_cycles(
                net.tensor, graph, profile, hand_over_precision(net, precisions, True)))
            for c in readers:
                g.add_edge(c, y)
    _, (npu_side, _) = nx.minimum_cut(g, "npu", "cpu")
    return [NPU if i in npu_side else CPU for i in range(len(decisions))]


def place(decisions: list[Decision], graph: Graph, profile: HardwareProfile, mode: str
          ) -> dict[str, float]:
    """Apply ``greedy`` or ``optimal`` in place; returns both estimates for the report."""
    greedy = [d.target for d in decisions]
    greedy_cycles = total_cycles(decisions, graph, profile, greedy)
    result = {"greedy_cycles": greedy_cycles, "optimal_cycles": greedy_cycles, "moved": 0}
    if mode == "greedy":
        return result
    best = optimal_targets(decisions, graph, profile)
    best_cycles = total_cycles(decisions, graph, profile, best)
    if best_cycles < greedy_cycles:
        for d, target in zip(decisions, best, strict=True):
            if d.target != target:
                d.target, d.moved_by_optimizer = target, True
        result.update(optimal_cycles=best_cycles,
                      moved=sum(d.moved_by_optimizer for d in decisions))
    return result
