"""Sustained load: the thermal model's properties, and the pipeline throttling a profile
whose cooling cannot hold full speed."""

from __future__ import annotations

import csv
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hardware.thermal import FrameModel, PowerMode, Thermal, TripPoint, run
from tests.conftest import run_inprocess

FRAME = FrameModel(time_at=lambda mhz: 0.5e-3 + 2e6 / (mhz * 1e6), dynamic_j=4e-3,
                   static_w=0.3)
MODE = PowerMode(frequency_mhz=1000)
TRIPS = [TripPoint(85, 800), TripPoint(95, 600)]


def _thermal(r: float = 40.0, c: float | None = 2.0, trips=TRIPS) -> Thermal:
    return Thermal(ambient_c=25, resistance_c_per_w=r, capacity_j_per_c=c, hysteresis_c=5,
                   trips=list(trips), critical_c=115)


def _onset(value: float | None) -> float:
    return math.inf if value is None else value


ambients = st.floats(min_value=-20, max_value=80)
resistances = st.floats(min_value=1, max_value=200)


@settings(max_examples=25, deadline=None)
@given(ambients, st.floats(min_value=0, max_value=30), resistances)
def test_a_hotter_ambient_never_throttles_later_nor_runs_cooler(ambient, hotter, r):
    cool = run(FRAME, MODE, _thermal(r), ambient, 120, 0)
    hot = run(FRAME, MODE, _thermal(r), ambient + hotter, 120, 0)
    assert _onset(hot.throttle_onset_s) <= _onset(cool.throttle_onset_s)
    assert hot.peak_temperature_c >= cool.peak_temperature_c - 1e-9


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=100, max_value=1000), st.floats(min_value=0.5, max_value=1.0),
       st.floats(min_value=0, max_value=1.0), resistances)
def test_a_lower_power_mode_never_draws_more_power(mhz, volts, static, r):
    low = PowerMode(frequency_mhz=mhz, voltage_scale=volts, static_scale=static)
    for fps in (0.0, 100.0):
        full = run(FRAME, MODE, _thermal(r, trips=[]), 25, 30, fps)
        lowered = run(FRAME, low, _thermal(r, trips=[]), 25, 30, fps)
        assert max(s.power_w for s in lowered.samples) <= \
            max(s.power_w for s in full.samples) + 1e-12


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=1, max_value=300), resistances)
def test_demand_below_capacity_never_throttles_more_than_back_to_back(fps, r):
    capacity = 1 / FRAME.seconds(MODE.frequency_mhz)
    demand = run(FRAME, MODE, _thermal(r), 25, 300, min(fps, capacity))
    flat_out = run(FRAME, MODE, _thermal(r), 25, 300, 0)
    assert _onset(demand.throttle_onset_s) >= _onset(flat_out.throttle_onset_s)
    assert demand.peak_temperature_c <= flat_out.peak_temperature_c + 1e-9


@settings(max_examples=20, deadline=None)
@given(resistances, st.floats(min_value=0, max_value=80))
def test_an_infinite_thermal_mass_never_throttles(r, ambient):
    result = run(FRAME, MODE, _thermal(r, c=None), ambient, 600, 0)
    assert result.throttle_onset_s is None
    assert {s.temperature_c for s in result.samples} == {ambient}


def test_a_hot_box_settles_under_the_trip_point_at_the_lower_clock():
    result = run(FRAME, MODE, _thermal(r=47, c=2, trips=[TripPoint(85, 500)]), 25, 600, 0)
    full_ss = 25 + (FRAME.dynamic_j / FRAME.seconds(1000) + FRAME.static_w) * 47
    assert full_ss > 85  # the cooling cannot hold full speed
    assert result.throttle_onset_s is not None
    tail = result.samples[-100:]
    assert all(s.frequency_mhz == 500 for s in tail)
    assert all(80 - 1e-6 <= s.temperature_c <= 85 + 1e-6 for s in tail)


def _sustained(tmp_path, name: str, *extra: str) -> dict:
    code, lines, _ = run_inprocess(
        "model=digits_mlp", "data=digits", "hardware=rk3588", "simulate.sustained.seconds=600",
        # the NPU alone heats and paces: no static, host or SoC power, no host work
        "hardware.energy.static_mw=0", "hardware.host.active_w=0", "hardware.thermal.soc_w=0",
        "simulate.preprocess_ms=0", "simulate.postprocess_ms=0",
        f"hydra.run.dir={tmp_path / name}",
        f"run.cache_dir={tmp_path / 'cache'}", *extra)
    assert code == 0, lines
    return json.loads((tmp_path / name / "metrics.json").read_text())


def test_the_pipeline_throttles_a_box_that_cannot_hold_full_speed(tmp_path):
    no_trips = "hardware.thermal.trips=[]"
    full = _sustained(tmp_path, "full", no_trips)["sustained_power_w"]
    slowed = _sustained(tmp_path, "slowed", no_trips,
                        "hardware.power_modes.performance.frequency_mhz=800")
    # cooling sized so that at the first trip's clock (800 MHz) the box settles at 82.5 C,
    # inside the trip's hysteresis band (80-85 C); at full speed it would not
    r = (82.5 - 25) / slowed["sustained_power_w"]
    assert 25 + full * r > 85
    box = [f"hardware.thermal.resistance_c_per_w={r}",
           f"hardware.thermal.capacity_j_per_c={60 / r}"]
    hot = _sustained(tmp_path, "hot", *box)
    assert hot["sustained_latency_ms"] > hot["latency_ms"]
    assert hot["sustained_latency_ms"] == slowed["sustained_latency_ms"]
    assert hot["throttle_onset_s"] is not None and hot["peak_temperature_c"] < 95
    with (tmp_path / "hot" / "simulate" / "sustained.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    late = rows[len(rows) // 2:]
    assert {float(row["frequency_mhz"]) for row in late} == {800.0}
    assert all(80 <= float(row["temperature_c"]) <= 85 for row in late)
    assert (tmp_path / "hot" / "simulate" / "sustained.png").read_bytes()[:4] == b"\x89PNG"
    bigger_heatsink = [f"hardware.thermal.resistance_c_per_w={r / 2}",
                       f"hardware.thermal.capacity_j_per_c={60 / r}"]
    cooled = _sustained(tmp_path, "cooled", *bigger_heatsink)
    assert _onset(cooled["throttle_onset_s"]) > hot["throttle_onset_s"]
    assert hot["cold_start_ms"] > hot["latency_ms"]  # driver setup + command upload



def test_a_throttled_frame_is_the_plan_re_costed_at_that_clock(tmp_path):
    """The sustained run's frame at a lower clock is the compiled plan priced there: equal
    to a whole run compiled at that clock (the plan is the same on this network), not the
    frame's cycles split and scaled (which gave 0.90-0.97x of it on rk3588)."""
    low = _sustained(tmp_path, "low", "model=mobilenet_v2", "data=synthetic",
                     "simulate.sustained.power_mode=powersave", "simulate.sustained.seconds=5")
    code, lines, _ = run_inprocess(
        "model=mobilenet_v2", "data=synthetic", "hardware=rk3588",
        "hardware.frequency_mhz=300", "hardware.energy.static_mw=0",
        f"hydra.run.dir={tmp_path / 'compiled_at_300'}", f"run.cache_dir={tmp_path / 'cache'}")
    assert code == 0, lines
    compiled = json.loads((tmp_path / "compiled_at_300" / "metrics.json").read_text())
    assert low["sustained_latency_ms"] == pytest.approx(compiled["latency_ms"], rel=1e-12)


def test_the_host_and_the_rest_of_the_soc_heat_the_package_the_npu_shares():
    """Hand-derived steady state: at a fixed clock (no trips) and back to back, the node
    settles at T_amb + R x (E_npu fps + E_host fps + P_static + P_soc) (Incropera's lumped
    RC); the host's energy per frame is paid at its own voltage, so a lower NPU mode cuts
    only the NPU's share. With the same cooling, the NPU alone stays under the 85 C trip
    and the package with its host and SoC does not."""
    import dataclasses

    r = 25.0
    thermal = _thermal(r, c=0.2, trips=TRIPS)
    fed = dataclasses.replace(FRAME, host_s=1e-3, host_w=1.5, soc_w=1.0)
    fps = 1 / FRAME.seconds(1000)
    no_trips = _thermal(r, c=0.2, trips=[])
    settled = run(fed, MODE, no_trips, 25, 300, 0).samples[-1].temperature_c
    assert settled == pytest.approx(25 + r * ((4e-3 + 1.5e-3) * fps + 0.3 + 1.0), abs=1e-6)
    low = PowerMode(frequency_mhz=1000, voltage_scale=0.5)
    power = run(fed, low, no_trips, 25, 1, 0).samples[-1].power_w
    assert power == pytest.approx((4e-3 * 0.25 + 1.5e-3) * fps + 0.3 + 1.0)
    assert run(FRAME, MODE, thermal, 25, 60, 0).throttle_onset_s is None
    assert run(fed, MODE, thermal, 25, 60, 0).throttle_onset_s is not None
    slow_host = dataclasses.replace(FRAME, host_s=10e-3, host_w=1.5)
    paced = run(slow_host, MODE, no_trips, 25, 1, 0).samples[-1]
    assert paced.fps == pytest.approx(100.0)
    assert paced.power_w == pytest.approx((4e-3 + 1.5 * 10e-3) * 100 + 0.3)
