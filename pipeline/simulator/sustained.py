"""``simulate.sustained``: minutes of inference through the profile's thermal model.

The compiled plan gives one frame: its time at each clock the governor sets, the plan
re-costed at that clock (``time_at``, from ``pipeline.evaluator``), and its dynamic energy;
``hardware.thermal.run`` steps that frame over the requested seconds; this module picks
the power mode and ambient, writes ``sustained.csv`` and ``sustained.png`` and returns the
metrics. One vectorless loop over 0.1 s steps: ten minutes is 6,000 steps,
milliseconds, whatever the frame rate.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from typing import Any

from hardware.profile import HardwareProfile
from hardware.thermal import FrameModel, PowerMode, SustainedRun, run
from pipeline.artifacts import pyplot, save_figure, write_csv
from pipeline.compiler.plan import Plan
from pipeline.reports.figures import draw_all

COLUMNS = ("time_s", "temperature_c", "frequency_mhz", "latency_ms", "power_w", "frames")


def power_mode(profile: HardwareProfile, name: str | None) -> PowerMode:
    """The named mode, the profile's default, or the profile's own clock at nominal. The
    name was checked at the door (pipeline.configuration.config.check_complete)."""
    name = name or profile.default_power_mode
    return PowerMode(frequency_mhz=profile.frequency_mhz) if name is None else \
        profile.power_modes[name]


def simulate(plan: Plan, time_at: Callable[[float], float],
             profile: HardwareProfile, cfg: Any, out_dir: Path, plots: bool,
             host_s: float = 0.0) -> dict[str, Any]:
    """``time_at``: a frame's seconds at a clock in MHz (asked once per clock);
    ``host_s``: the host's busy seconds per frame (pre- and post-processing, fallback)."""
    mode = power_mode(profile, cfg.power_mode)
    ambient = profile.thermal.ambient_c if cfg.ambient_c is None else float(cfg.ambient_c)
    dynamic_j = sum(k.cost.energy_pj for k in plan.kernels
                    if k.target == "npu") * 1e-12
    frame = FrameModel(cache(time_at), dynamic_j, profile.energy.static_mw * 1e-3,
                       host_s=host_s, host_w=profile.host.active_w,
                       soc_w=profile.thermal.soc_w)
    result = run(frame, mode, profile.thermal, ambient, float(cfg.seconds), float(cfg.fps))
    write_csv(out_dir / "sustained.csv", _rows(result), COLUMNS)
    if plots:  # drawn where the run's other figures are (pipeline.reports.figures)
        draw_all([partial(_plot, result, profile, mode, out_dir / "sustained.png")])
    last = result.samples[-1]
    return {
        "sustained_latency_ms": last.frame_s * 1e3,
        "sustained_fps": last.fps,
        "sustained_power_w": last.power_w,
        "throttle_onset_s": result.throttle_onset_s,
        "shutdown_s": result.shutdown_s,
        "peak_temperature_c": result.peak_temperature_c,
    }


def _rows(result: SustainedRun) -> list[dict[str, Any]]:
    """One row per simulated second (the model steps every 0.1 s)."""
    every = max(1, round(1.0 / (result.samples[1].time_s - result.samples[0].time_s))) \
        if len(result.samples) > 1 else 1
    picked = result.samples[::every]
    if picked[-1] is not result.samples[-1]:
        picked.append(result.samples[-1])
    return [{"time_s": round(s.time_s, 3), "temperature_c": round(s.temperature_c, 4),
             "frequency_mhz": s.frequency_mhz, "latency_ms": round(s.frame_s * 1e3, 6),
             "power_w": round(s.power_w, 6), "frames": round(s.frames, 3)} for s in picked]


def _plot(result: SustainedRun, profile: HardwareProfile, mode: PowerMode, path: Path) -> None:
    plt = pyplot()
    t = [s.time_s for s in result.samples]
    fig, axes = plt.subplots(4, 1, figsize=(8, 8), sharex=True)
    series = [("temperature (°C)", [s.temperature_c for s in result.samples]),
              ("NPU clock (MHz)", [s.frequency_mhz for s in result.samples]),
              ("latency (ms)", [s.frame_s * 1e3 for s in result.samples]),
              ("power (W)", [s.power_w for s in result.samples])]
    for ax, (label, values) in zip(axes, series, strict=True):
        ax.plot(t, values, color="#2b7bba")
        ax.set_ylabel(label)
    for trip in profile.thermal.trips:
        axes[0].axhline(trip.temperature_c, color="#d62728", linestyle="--", linewidth=0.8)
    if profile.thermal.critical_c is not None:
        axes[0].axhline(profile.thermal.critical_c, color="black", linestyle=":", linewidth=0.8)
    if result.throttle_onset_s is not None:
        for ax in axes:
            ax.axvline(result.throttle_onset_s, color="#ff9f1c", linewidth=0.8)
    axes[-1].set_xlabel("time (s)")
    axes[0].set_title(f"{profile.name} at {mode.frequency_mhz:g} MHz: sustained load "
                      "(dashed: trip points)")
    fig.tight_layout()
    save_figure(fig, path)
