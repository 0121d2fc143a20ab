"""Sustained load: power modes, a lumped thermal model and the governor that throttles.

The profile sections (``power_modes``, ``thermal``, ``cold_start``) and the model that steps
them over minutes of inference. Why written here: no library models an NPU's temperature
from a compiled plan's per-frame energy, and none of the tools this field uses (Vela,
RKNN-Toolkit2, ZigZag, SCALE-Sim) does it at all.

The mechanism, each part a textbook formula:
- Power: a frame's dynamic energy scales with V^2 (CMOS switching energy C V^2, Weste &
  Harris, *CMOS VLSI Design*, 4th ed., sec. 5.1); static power with the mode's
  ``static_scale``. The package the thermal node stands for holds more than the NPU: the
  host cores that feed it (pre- and post-processing, fallback kernels) draw
  ``host.active_w`` while they work, and the rest of the SoC its ``thermal.soc_w``; both
  heat the same die. At ``fps`` frames per second, P = (E_dyn * (V/V0)^2 + E_host) * fps
  + P_static + P_soc, with E_host = host.active_w x the host's busy seconds per frame
  (its own clock: the NPU's governor does not change it). Back to back, frames come at
  the pace of the slower pipeline stage, the NPU's frame or the host's work for it.
- Frame time at clock f: the compiled plan re-costed at f (``FrameModel.time_at``): the
  same kernels, tiles and placement, their compute and dispatch cycles now at f while DRAM,
  host and link keep their rates in bytes per second, so each kernel's overlap and bound
  are found again at f (the chip runs the model it was compiled to; nothing recompiles
  when the governor steps the clock).
- Temperature: one thermal node, dT/dt = (P - (T - T_amb) / R) / C, stepped exactly for a
  piecewise-constant P: T(t + dt) = T_ss + (T - T_ss) exp(-dt / RC), T_ss = T_amb + P R
  (a lumped RC model, Incropera, *Fundamentals of Heat and Mass Transfer*, sec. 5.2).
  ``capacity_j_per_c: null`` is an infinite thermal mass: the temperature never moves.
- Governor: trip points in rising temperature, each with the clock it imposes; a trip
  engages at its temperature and releases ``hysteresis_c`` below it (the Linux thermal
  framework's step-wise governor; Coral's PCIe driver's dynamic frequency scaling). At
  ``critical_c`` the device shuts down: no more frames.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from omegaconf import MISSING

from hardware.bounds import NON_NEGATIVE, POSITIVE, BoundsError, bounded

STEP_S = 0.1  # governor polling / integration step (Coral's driver polls every 0.1-1 s)


@dataclass
class PowerMode:
    frequency_mhz: float = bounded(MISSING, POSITIVE, plausible=(1, 10000))
    voltage_scale: float = bounded(1.0, POSITIVE, plausible=(0.3, 1.5))  # V / nominal V
    static_scale: float = bounded(1.0, NON_NEGATIVE, plausible=(0, 2))


@dataclass
class TripPoint:
    temperature_c: float = MISSING
    frequency_mhz: float = bounded(MISSING, POSITIVE)  # the clock while engaged


@dataclass
class Thermal:
    ambient_c: float = 25.0
    # the rest of the package's steady power while the application runs (idle CPU
    # clusters, interconnect, memory controller): heat the NPU shares but does not cause
    soc_w: float = bounded(0.0, NON_NEGATIVE, plausible=(0, 100))
    resistance_c_per_w: float | None = bounded(None, POSITIVE, plausible=(0.1, 1000))
    capacity_j_per_c: float | None = bounded(None, POSITIVE)  # None: infinite mass
    hysteresis_c: float = bounded(5.0, NON_NEGATIVE)
    trips: list[TripPoint] = field(default_factory=list)
    critical_c: float | None = None


@dataclass
class ColdStart:
    """What only the first inference pays, beyond loading cached weights (which the plan
    sizes): driver and command-buffer setup, and each kernel's command upload."""

    setup_us: float = bounded(0.0, NON_NEGATIVE)
    command_bytes_per_kernel: int = bounded(0, NON_NEGATIVE)


def check_thermal(thermal: Thermal, modes: dict[str, PowerMode], default_mode: str | None,
                  clock_mhz: float, prefix: str) -> None:
    """Cross-checks the field ranges cannot express; the error names the key."""
    for name, mode in modes.items():
        for key in ("frequency_mhz", "voltage_scale"):
            if not getattr(mode, key) > 0:
                raise BoundsError(f"{prefix}.power_modes.{name}.{key}", "must be > 0")
        if mode.static_scale < 0:
            raise BoundsError(f"{prefix}.power_modes.{name}.static_scale", "must be >= 0")
    if modes and default_mode not in modes:
        raise BoundsError(f"{prefix}.default_power_mode", f"'{default_mode}' is not one of "
                          f"power_modes ({', '.join(modes)})")
    top = max([m.frequency_mhz for m in modes.values()] + [clock_mhz])
    key = f"{prefix}.thermal"
    for i, trip in enumerate(thermal.trips):
        if trip.frequency_mhz <= 0 or trip.frequency_mhz >= top:
            raise BoundsError(f"{key}.trips[{i}].frequency_mhz",
                              f"{trip.frequency_mhz:g} MHz: a trip must lower the clock "
                              f"(below {top:g} MHz, the fastest mode) and stay above 0")
        if i and trip.temperature_c <= thermal.trips[i - 1].temperature_c:
            raise BoundsError(f"{key}.trips[{i}].temperature_c",
                              "trip points must rise in temperature")
        if i and trip.frequency_mhz >= thermal.trips[i - 1].frequency_mhz:
            raise BoundsError(f"{key}.trips[{i}].frequency_mhz",
                              "each trip must lower the clock further than the one before")
    if thermal.critical_c is not None and thermal.trips and \
            thermal.critical_c <= thermal.trips[-1].temperature_c:
        raise BoundsError(f"{key}.critical_c", "must be above the last trip point")
    if thermal.trips and thermal.resistance_c_per_w is None:
        raise BoundsError(f"{key}.resistance_c_per_w",
                          "trip points need a thermal model (resistance_c_per_w)")


@dataclass(frozen=True)
class FrameModel:
    """One frame of the compiled plan, as the sustained run needs it: its time at any clock
    the governor may set, and its energy. ``time_at`` re-costs the plan at that clock
    (``pipeline.evaluator``: the compiler's own cost functions with the DRAM, link and
    host rates fixed in seconds), so a DRAM-bound kernel keeps its time while a compute-
    bound one stretches, each by its own mechanism rather than by a split of the frame."""

    time_at: Callable[[float], float]  # seconds per frame at a clock in MHz
    dynamic_j: float  # switching energy per frame at nominal voltage
    static_w: float  # static power at nominal
    host_s: float = 0.0  # the host's busy seconds per frame (its own clock)
    host_w: float = 0.0  # the host's power while busy (its own voltage)
    soc_w: float = 0.0  # the rest of the package, constant while the application runs

    def seconds(self, mhz: float) -> float:
        return self.time_at(mhz)

    def period(self, mhz: float) -> float:
        """Seconds between frames back to back: the NPU's frame or the host's work for it,
        whichever is longer (the two run as pipeline stages, as the throughput run has
        them)."""
        return max(self.time_at(mhz), self.host_s)


@dataclass(frozen=True)
class Sample:
    time_s: float
    temperature_c: float
    frequency_mhz: float
    frame_s: float  # 0 once shut down
    fps: float  # frames per second served in this step (demand, or what the clock allows)
    power_w: float
    frames: float  # cumulative


@dataclass(frozen=True)
class SustainedRun:
    samples: list[Sample]
    throttle_onset_s: float | None
    shutdown_s: float | None
    peak_temperature_c: float


def steady_state_c(power_w: float, ambient_c: float, thermal: Thermal) -> float:
    """Where the thermal node settles at a constant power: T_ss = T_amb + P R."""
    assert thermal.resistance_c_per_w is not None
    return ambient_c + power_w * thermal.resistance_c_per_w


def run(frame: FrameModel, mode: PowerMode, thermal: Thermal, ambient_c: float,
        seconds: float, fps: float) -> SustainedRun:
    """Step the plan's frames through ``seconds`` of demand (``fps``; 0: back to back)."""
    steps = max(1, math.ceil(seconds / STEP_S))
    dt = seconds / steps
    r, c = thermal.resistance_c_per_w, thermal.capacity_j_per_c
    # no resistance: no thermal model; no capacity: an infinite mass; either way T stays
    decay = 1.0 if r is None or c is None else math.exp(-dt / (r * c))
    temperature, engaged, frames = ambient_c, 0, 0.0
    onset = shutdown = None
    peak = temperature
    samples = [Sample(0.0, temperature, mode.frequency_mhz, frame.seconds(mode.frequency_mhz),
                      0.0, 0.0, 0.0)]
    for i in range(1, steps + 1):
        while engaged < len(thermal.trips) and \
                temperature >= thermal.trips[engaged].temperature_c:
            engaged += 1
        while engaged and temperature < thermal.trips[engaged - 1].temperature_c - \
                thermal.hysteresis_c:
            engaged -= 1
        if shutdown is None and thermal.critical_c is not None and \
                temperature >= thermal.critical_c:  # started at or above it
            shutdown = (i - 1) * dt
        mhz = mode.frequency_mhz if not engaged else min(
            mode.frequency_mhz, thermal.trips[engaged - 1].frequency_mhz)
        if onset is None and mhz < mode.frequency_mhz and shutdown is None:
            onset = (i - 1) * dt
        frame_s = frame.seconds(mhz)
        capacity = 1 / frame.period(mhz)
        rate = 0.0 if shutdown is not None else (capacity if fps <= 0 else
                                                 min(fps, capacity))
        power = 0.0 if shutdown is not None else (
            (frame.dynamic_j * mode.voltage_scale ** 2 + frame.host_w * frame.host_s) * rate
            + frame.static_w * mode.static_scale + frame.soc_w)
        running = dt
        if decay < 1.0:
            steady = steady_state_c(power, ambient_c, thermal)
            after = steady + (temperature - steady) * decay
            critical = thermal.critical_c
            if shutdown is None and critical is not None and after >= critical > temperature:
                # the exact moment the node reaches the critical temperature: off from then
                running = -r * c * math.log((critical - steady) / (temperature - steady))
                shutdown, after = (i - 1) * dt + running, critical
            temperature = after
        peak = max(peak, temperature)
        frames += rate * running
        off = shutdown is not None
        samples.append(Sample(i * dt, temperature, mhz, 0.0 if off else frame_s,
                              0.0 if off else rate, 0.0 if off else power, frames))
    return SustainedRun(samples, onset, shutdown, peak)
