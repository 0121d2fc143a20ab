"""The execution plan (``compile/plan.json``) as types: the contract between compile and
everything after it (simulate, the trace, the reports, the evaluator, calibration).

Compile builds the plan, ``Plan.from_json`` checks it against these types on the way out
(an unknown, missing or mistyped field is an error naming its path, not a silent KeyError
three modules later) and every reader gets the typed ``Plan`` back from
``read_plan``. The JSON is the dataclasses' fields as they are (``Transfer.source`` is
written ``from``, a Python keyword); ``docs/plan.md`` is generated from the field comments
below (``python -m pipeline.compiler.plan > docs/plan.md``; a test keeps it current).
Changing a field's meaning bumps ``PLAN_VERSION``.

One file of ~350 lines: the plan's types, its one JSON round trip and its generated
documentation must not drift apart, so they are kept together.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import types
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pipeline.configuration.schema_keys import did_you_mean, field_docs, type_hints
from pipeline.errors import UserError

PLAN_VERSION = "npuflow.plan/4"
VERSION_NOTE = ("3: typed (these tables are generated from the types), kernel `label`, "
                "hand-overs charged once per tensor and direction")
_RENAMED = {"source": "from"}  # field -> JSON key (`from` is a Python keyword)


class PlanError(ValueError):
    """A plan that does not match the types: names the path of the first bad field."""


@dataclass(frozen=True, slots=True)
class Cost:
    """What the kernel costs on its target (``hardware.cost.KernelCost``)."""

    unit: str  # array | vector | memory | free | host: the unit that runs it
    compute_cycles: int  # the unit's time with ideal memory
    memory_cycles: int  # DMA time of its DRAM traffic
    overhead_cycles: int  # dispatch
    total_cycles: int  # compute and memory overlapped as the buffering allows, plus dispatch
    dram_bytes: int  # DRAM traffic, tile refetches and spills included
    compulsory_dram_bytes: int  # each operand read or written once
    weight_dram_bytes: int  # the weights' share of dram_bytes
    lut_cycles: int  # the part of compute_cycles an output-stage lookup table takes
    sram_bytes: int  # array/vector-side SRAM traffic
    energy_pj: float  # dynamic energy (static power is charged over the timeline)
    mapping_efficiency: float  # useful MACs / MACs the array's cycles could do
    bound: str  # compute | memory | overhead: the largest of the three


@dataclass(frozen=True, slots=True)
class Check:
    """One NPU rule evaluated on one node."""

    node: str
    rule: str  # the rule's key in the profile's ops section
    text: str  # the rule in words
    passed: bool
    detail: str  # the value it was checked against


@dataclass(frozen=True, slots=True)
class Gemm:
    """The kernel's GEMM lowering, channel-aligned as the NPU stores it."""

    m: int
    k: int
    n: int
    groups: int


@dataclass(frozen=True, slots=True)
class Tiles:
    """The tiles and loop order chosen (``hardware.tiling``)."""

    tm: int
    tn: int
    tk: int
    order: str  # tile loops, outer to inner


@dataclass(frozen=True, slots=True)
class Kernel:
    """One fused kernel, in dependency order."""

    id: int  # position in the plan
    name: str  # its first node's name: the id tiling overrides use
    label: str  # the name, prefixed with its op type when the name does not say it
    ops: list[str]  # member ONNX nodes
    op_types: list[str]
    pattern: str  # fusion pattern: single | epilogue | residual | elementwise | gelu | silu ...
    composite: str | None  # the op a fused pattern was checked as (Gelu, ...)
    family: str  # op family of its anchor
    target: str  # npu | cpu
    precision: str  # computing precision
    layout: str  # tensor layout on its target
    unit: str  # where it runs (a depthwise kernel in the engine mode runs on the array)
    macs: int  # useful MACs
    weight_bytes: int  # its constant operands as held (packed int4, a Gather's whole table)
    depthwise: bool  # a depthwise convolution
    gemm: Gemm | None
    tiling: Tiles | None
    cores: int  # cores it is split over
    inputs: list[str]  # activation tensors read from outside the kernel
    outputs: list[str]  # tensors used outside it
    deps: list[int]  # kernel ids it waits for
    cost: Cost
    checks: list[Check]  # every NPU rule evaluated
    moved_by_optimizer: bool  # placed by the min-cut against the greedy rule
    fused_form_failed: bool  # a part of a fused kernel the NPU could not run whole
    fused_form: str | None  # that fused form
    fused_failed_checks: list[Check]  # the rules the fused form failed
    npu_estimate_cycles: float | None  # placement's input (null: not NPU-able)
    cpu_estimate_cycles: float


@dataclass(frozen=True, slots=True)
class Transfer:
    """One hand-over between host and NPU: one per tensor and direction, however many
    readers sit on the far side."""

    tensor: str
    source: int | None  # written `from`: the kernel id that writes it (null: the host)
    to: int | None  # the first reader on the far side (null: the host)
    direction: str  # npu->cpu | cpu->npu
    bytes: int
    layout_conversion: str | None  # e.g. NHWC->NCHW, or null
    cycles: int  # link + sync + conversion


@dataclass(frozen=True, slots=True)
class Buffer:
    """An activation buffer of the memory plan."""

    tensor: str
    size: int  # bytes
    start: int  # kernel index of its producer (-1: a graph input)
    end: int  # kernel index of its last consumer
    memory: str  # sram | dram
    offset: int  # byte offset in its arena
    want_sram: bool  # the plan wanted it in SRAM


@dataclass(frozen=True, slots=True)
class Memory:
    """Where the plan keeps things."""

    sram_bytes: int
    activation_budget_bytes: int  # the SRAM share activations may take
    weights: str  # the compile.memory.weights policy
    weight_bytes: int  # the NPU kernels' weights as stored
    cached_weight_bytes: int  # kept on chip across inferences
    streamed_weight_bytes: int  # read every inference
    weight_dram_traffic_bytes: int  # what streaming them moves (refetches, compression)
    tile_budget_bytes: int
    sram_arena_peak_bytes: int
    sram_live_peak_bytes: int  # lower bound: the most bytes live at once
    sram_headroom: float  # 1 - arena peak / activation budget
    dram_arena_peak_bytes: int
    spilled_to_dram: list[str]  # tensors wanted in SRAM that did not fit


@dataclass(frozen=True, slots=True)
class Placement:
    """How kernels were split between NPU and host."""

    mode: str  # greedy | optimal
    greedy_cycles: float  # serial sum of the final plan's kernels and transfers, greedy
    optimal_cycles: float  # the same for the min-cut's assignment (= greedy if not faster)
    moved: int  # kernels the min-cut moved (0 when its plan was not faster)


@dataclass(frozen=True, slots=True)
class Plan:
    """The execution plan: simulate reads nothing but this and the hardware profile."""

    version: str  # npuflow.plan/N: the format's version
    graph: str  # the compiled graph's name
    profile: str  # the hardware profile it was compiled for
    frequency_mhz: float  # the clock its cycles are counted at
    inputs: list[str]  # graph input tensors (they live on the host)
    outputs: list[str]  # graph output tensors
    batch: int  # images per inference
    placement: Placement  # how kernels were split between NPU and host
    uncosted_ops: list[str]  # control-flow nodes run on the host, their bodies uncosted
    kernels: list[Kernel]  # in dependency order
    transfers: list[Transfer]  # every hand-over between host and NPU
    buffers: list[Buffer]  # the activation buffers of the memory plan
    memory: Memory  # SRAM, arena peaks and weights

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        if data.get("version") != PLAN_VERSION:
            raise PlanError(f"plan version {data.get('version')!r}: this npuflow reads "
                            f"{PLAN_VERSION} (compile again)")
        return _build(cls, data, "plan")

    def to_json(self) -> dict[str, Any]:
        return _plain(self)

    def repriced(self, body: dict[str, Any]) -> Plan:
        """This plan with the kernels' prices, the transfers and the memory figures of
        ``body`` (``driver.recost`` of the same placed kernels: the batch evaluator's
        path, so built directly rather than checked field by field)."""
        kernels = [dataclasses.replace(
            k, unit=e["unit"], cores=e["cores"], cost=Cost(**e["cost"]),
            tiling=None if e["tiling"] is None else Tiles(**e["tiling"]))
            for k, e in zip(self.kernels, body["kernels"], strict=True)]
        transfers = [Transfer(t["tensor"], t["from"], t["to"], t["direction"], t["bytes"],
                              t["layout_conversion"], t["cycles"]) for t in body["transfers"]]
        return dataclasses.replace(self, kernels=kernels, transfers=transfers,
                                   memory=Memory(**body["memory"]))


def read_plan(path: Path) -> Plan:
    """compile/plan.json, typed; a file that does not match is one line naming it.

    Plans are remembered per process by the file's bytes: a sweep job's compile stage
    builds the plan it writes (``remember_plan``), and its simulate stage and report read
    the same bytes again (parsing and checking a plan was ~10 ms a read). A Plan is frozen;
    the same bytes give the same Plan."""
    try:
        data = path.read_bytes()
        key = hashlib.blake2b(data, digest_size=16).digest()
        plan = _READ.get(key)
        if plan is None:
            plan = Plan.from_json(json.loads(data))
            _remember(key, plan)
        return plan
    except (PlanError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: {exc}") from None


def remember_plan(path: Path, plan: Plan) -> None:
    """``plan`` is what ``path`` reads as: compile wrote the file from the data it built
    ``plan`` from (tests/test_compile.py checks a fresh parse equals it)."""
    _remember(hashlib.blake2b(path.read_bytes(), digest_size=16).digest(), plan)


def _remember(key: bytes, plan: Plan) -> None:
    if len(_READ) >= 64:
        _READ.pop(next(iter(_READ)))
    _READ[key] = plan


_READ: dict[bytes, Plan] = {}


def _key(field: str) -> str:
    return _RENAMED.get(field, field)


Convert = typing.Callable[[Any], Any]


class _Bad(Exception):
    """A field that does not match, its path built as the error unwinds (the success path,
    the batch evaluator's, builds no strings)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path, self.message = path, message


@cache
def _fields(cls: type) -> tuple[tuple[str, str, Convert], ...]:
    """(field, JSON key, converter) per field, worked out once per type: reading a plan is
    on the batch evaluator's path (thousands of plans a minute)."""
    hints = type_hints(cls)
    return tuple((f.name, _key(f.name), _converter(hints[f.name]))
                 for f in dataclasses.fields(cls))


def _build(cls: type, data: Any, where: str) -> Any:
    try:
        return _object(cls, data)
    except _Bad as bad:
        raise PlanError(f"{where}{bad.path}: {bad.message}") from None


def _object(cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise _Bad("", f"expected an object, got {type(data).__name__}")
    spec = _fields(cls)
    values = {}
    for name, key, convert in spec:
        if key not in data:
            _unknown(data, spec)
            raise _Bad("", f"missing field {key!r}")
        try:
            values[name] = convert(data[key])
        except _Bad as bad:
            raise _Bad(f".{key}{bad.path}", bad.message) from None
    if len(data) != len(spec):
        _unknown(data, spec)
    return cls(**values)


def _unknown(data: dict[str, Any], spec: tuple[tuple[str, str, Convert], ...]) -> None:
    known = [key for _, key, _ in spec]
    extra = sorted(set(data) - set(known))
    if extra:
        raise _Bad("", f"unknown field {extra[0]!r}{did_you_mean(extra[0], known)}")


def _converter(kind: Any) -> Convert:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        inner = _converter(next(a for a in args if a is not type(None)))
        if type(None) not in args:
            return inner
        return lambda value: None if value is None else inner(value)
    if origin is list:
        item = _converter(args[0])

        def each(value: Any) -> Any:
            if not isinstance(value, list):
                raise _Bad("", "expected a list")
            out = []
            for i, v in enumerate(value):
                try:
                    out.append(item(v))
                except _Bad as bad:
                    raise _Bad(f"[{i}]{bad.path}", bad.message) from None
            return out
        return each
    if dataclasses.is_dataclass(kind):
        return lambda value: _object(kind, value)
    allowed = (int, float) if kind is float else (kind,)

    def scalar(value: Any) -> Any:
        if type(value) not in allowed:
            raise _Bad("", f"expected {kind.__name__}, got {value!r}")
        return value
    return scalar


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {_key(f.name): _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


def markdown() -> str:
    """docs/plan.md: one table per type, from the field comments above."""
    lines = [f"# The execution plan (`compile/plan.json`, version `{PLAN_VERSION}`)", "",
             "Generated from the types in `pipeline/compiler/plan.py` by `python -m "
             "pipeline.compiler.plan > docs/plan.md` (a test fails when it is stale): do "
             "not edit by hand. Changing a field's meaning bumps the version "
             f"({VERSION_NOTE}).", ""]
    for cls in (Plan, Placement, Kernel, Cost, Check, Gemm, Tiles, Transfer, Buffer, Memory):
        docs, hints = field_docs(cls), type_hints(cls)
        lines += [f"## {cls.__name__}", "", (cls.__doc__ or "").strip(), "",
                  "| key | type | meaning |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            kind = str(hints[f.name]).replace("pipeline.compiler.plan.", "")
            kind = kind.replace("<class '", "").replace("'>", "").replace("typing.", "")
            meaning = docs.get(f.name, "").replace("|", "\\|")
            lines.append(f"| `{_key(f.name)}` | {kind.replace('|', 'or')} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # the module's own types, not __main__'s copies
    from pipeline.compiler import plan

    sys.stdout.write(plan.markdown())
