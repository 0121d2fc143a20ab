"""Execution units: where a kernel runs on the chip and what that costs.

Each unit is a class in its own module here, with its cost function and the profile
section it reads: the MAC array (``array``), the vector unit (``vector``), the depthwise
engine (``depthwise_engine``), data-movement copies (``copy``, or ``pooling_copy`` on a
chip that copies on its pooling engine), views that move nothing (``free``) and the host
CPU (``host``); an output stage (``lut_epilogue``) adds its time to
the kernels it applies to; a DMA model (``dma_channels``) sets the rate each of a
kernel's DRAM streams gets. The profile selects and parameterises them (which unit a
depthwise convolution runs on, whether an output stage exists, every rate). Modules are
discovered, so adding a unit is adding a module: ``hardware.cost`` asks ``unit_for`` which
unit runs a kernel and ``output_stages`` which stages follow, the units ask
``dram_channels`` for their streams' rates, the replay asks ``lane_of`` where its time is
drawn; nothing else names a unit.

A unit that needs parameters the chip-wide sections (``mac_array``, ``vector_unit``,
``epilogue``, ``host``) do not have declares them as its own ``Section`` dataclass (the
same ``bounded`` fields as the profile's); the profile gives them under
``units: {<name>: {...}}``, ``hardware.profile`` checks them against that dataclass once,
when the profile is built, and the unit reads ``section(profile, name)``. A unit whose
section a profile omits is not fitted on that chip.

Why written here: the vendors' own estimators (Vela's per-unit performance model, RKNN's
cycle estimate) are closed or tied to one chip; these are the mechanisms they model, one
module each, with each formula's source in its docstring.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from hardware import energy as energy_model
from hardware.kernel_cost import (
    WIDTHS,
    KernelCost,
    bytes_per_cycle,
    latency_cycles,
    operand_bytes,
    sram_port_cycles,
)
from hardware.memory import Channels, Tiling, overlap, transfer_cycles
from hardware.profile_schema import HardwareProfile
from ops.work import Work


@dataclass(frozen=True)
class Operands:
    """Where a kernel's operands live, as the compiler placed them: the input read from
    DRAM, the output written to it, the weights' DRAM bytes (None: stored size; 0:
    resident in SRAM; the compressed size) and the tiling an array kernel runs with."""

    a_in_dram: bool = True
    c_to_dram: bool = True
    weight_bytes: int | None = None
    tiling: Tiling | None = None


class Unit(ABC):
    """One execution unit. ``runs`` says whether it runs this work on this profile (exactly
    one NPU unit must); ``cost`` prices it."""

    name: ClassVar[str]
    lane: ClassVar[str]  # the timeline lane its time is drawn in
    host: ClassVar[bool] = False  # the fallback CPU rather than an NPU unit
    Section: ClassVar[type | None] = None  # its own profile section's schema, if any
    # the unit it takes kernels from where both claim them (a chip's own way of copying
    # replaces the generic copy): the claim is decided here, not by editing that unit
    replaces: ClassVar[str | None] = None

    @staticmethod
    @abstractmethod
    def runs(work: Work, profile: HardwareProfile, depthwise: bool) -> bool:
        """Does this unit run ``work`` on ``profile``?"""

    @staticmethod
    @abstractmethod
    def cost(work: Work, precision: str, profile: HardwareProfile, where: Operands
             ) -> KernelCost:
        """The kernel's cost on this unit."""


class OutputStage(ABC):
    """A stage after a unit's output (an activation lookup table): ``after`` returns the
    cost with the stage's time added, or the cost unchanged where it does not apply."""

    name: ClassVar[str]
    Section: ClassVar[type | None] = None

    @staticmethod
    @abstractmethod
    def after(cost: KernelCost, work: Work, profile: HardwareProfile) -> KernelCost:
        """``cost`` with this stage's time added where it applies."""


# the DRAM read channel a unit's input stream takes: convolution-style input fetches
# (the array, the depthwise engine) or streamed operands (elementwise passes, copies)
FEATURE_MAPS, STREAMS = "feature_maps", "streams"


class DmaModel(ABC):
    """How a chip's DMA moves a kernel's streams. Fitted on a profile that has its
    section; without one, every stream shares the DRAM bandwidth and nothing else binds."""

    name: ClassVar[str]
    Section: ClassVar[type]

    @staticmethod
    @abstractmethod
    def channels(profile: HardwareProfile, reads: str, work: Work, precision: str
                 ) -> Channels:
        """Each of ``work``'s streams' own rate in bytes per NPU cycle at ``precision``;
        ``reads`` names the input's read channel (FEATURE_MAPS or STREAMS)."""


UNITS: dict[str, type[Unit]] = {}
STAGES: dict[str, type[OutputStage]] = {}
DMA_MODELS: dict[str, type[DmaModel]] = {}


def register(cls: type) -> type:
    """Class decorator: a unit, an output stage or a DMA model, by its ``name`` (one
    namespace: the name is also the key of its profile section)."""
    table: dict = UNITS if issubclass(cls, Unit) else \
        DMA_MODELS if issubclass(cls, DmaModel) else STAGES
    if any(cls.name in known for known in (UNITS, STAGES, DMA_MODELS)):
        raise ValueError(f"execution unit '{cls.name}' registered twice")
    table[cls.name] = cls
    return cls


def unit_sections() -> dict[str, type]:
    """Every registered unit's own profile section schema, by the unit's name."""
    found = {**UNITS, **STAGES, **DMA_MODELS}
    return {name: cls.Section for name, cls in sorted(found.items())
            if cls.Section is not None}


def section(profile: HardwareProfile, name: str) -> Any:
    """The unit's typed section on this profile, or None where the chip lacks the unit."""
    return profile.units.get(name)


def dram_channels(profile: HardwareProfile, reads: str, work: Work, precision: str
                  ) -> Channels | None:
    """Each of ``work``'s DRAM streams' own rate from the DMA model the profile fits, or
    None (the streams only share the bandwidth)."""
    fitted = [m for name, m in DMA_MODELS.items() if name in profile.units]
    if len(fitted) > 1:
        raise LookupError(f"{len(fitted)} DMA models fitted: {sorted(m.name for m in fitted)}")
    return fitted[0].channels(profile, reads, work, precision) if fitted else None


def _discover() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}")


def unit_for(work: Work, profile: HardwareProfile, depthwise: bool) -> type[Unit]:
    """The NPU unit that runs ``work`` on ``profile``."""
    chosen = [u for u in UNITS.values() if not u.host and u.runs(work, profile, depthwise)]
    replaced = {u.replaces for u in chosen if u.replaces}
    chosen = [u for u in chosen if u.name not in replaced]
    if len(chosen) != 1:
        raise LookupError(f"{len(chosen)} execution units claim a {work.unit} kernel "
                          f"(depthwise={depthwise}): {[u.name for u in chosen]}")
    return chosen[0]


def output_stages() -> list[type[OutputStage]]:
    return [STAGES[name] for name in sorted(STAGES)]


def host_unit() -> type[Unit]:
    return next(u for u in UNITS.values() if u.host)


def lane_of(unit: str) -> str:
    """The timeline lane of a unit's time (the plan's types guarantee a known unit)."""
    return UNITS[unit].lane


def streamed(work: Work, precision: str, profile: HardwareProfile, where: Operands,
             unit: str, compute: int, efficiency: float = 1.0, pipelined: bool = True,
             moves: bool = True, reads: str = STREAMS) -> KernelCost:
    """A kernel that streams each operand once (vector, copy, depthwise-engine and view
    kernels): its traffic is compulsory; the DMA time of its streams overlaps its compute
    when ``pipelined`` (a read DMA -> compute -> write DMA pipeline: NVDLA's SDP / PDP in
    memory-to-memory mode, Ethos-U's elementwise), else adds to it; every operand byte
    crosses the SRAM port, and each stream moves at its DMA channel's rate where the
    profile fits a DMA model (``reads``: the input's channel). ``moves=False``: a view,
    which moves and dispatches nothing."""
    act_w = WIDTHS[precision][0]
    sizes = operand_bytes(work, precision, where.a_in_dram, where.c_to_dram,
                          where.weight_bytes)
    dram = sizes.a + sizes.b + sizes.c if moves else 0
    sram = (work.input_elems + work.output_elems) * act_w + sizes.b if moves else 0
    streams = sum(1 for x in (sizes.a, sizes.b, sizes.c) if x)
    channels = dram_channels(profile, reads, work, precision)
    memory = transfer_cycles(dram, streams, bytes_per_cycle(profile), latency_cycles(profile),
                             (sizes.a, sizes.b, sizes.c) if moves else None, channels)
    dispatch = profile.dispatch_cycles if moves else 0
    body = overlap(compute, memory, pipelined, memory // max(streams, 1))
    if moves:
        body = max(body, sram_port_cycles(work, precision, profile, channels))
    return KernelCost(
        unit=unit, precision=precision, macs=work.macs, compute_cycles=compute,
        memory_cycles=memory, overhead_cycles=dispatch, total_cycles=body + dispatch,
        dram_bytes=dram, compulsory_dram_bytes=dram, sram_bytes=sram,
        energy_pj=energy_model.dynamic_energy_pj(work.macs, precision, sram, dram,
                                                 profile.energy),
        mapping_efficiency=efficiency, weight_dram_bytes=sizes.b if dram else 0,
    )

_discover()
