"""The in-process API: the CLI's run without a subprocess, typed metrics, the batch
evaluator equal to full runs where the plan is held."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pipeline import api
from pipeline.errors import UserError

BASE = ("model=mobilenet_v2", "hardware=rk3588", "quant=int8", "data.calibration_size=4",
        "data.eval_size=4")


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return api.run(*BASE, run_dir=tmp_path_factory.mktemp("api") / "run")


def test_a_run_returns_the_cli_s_metrics_typed(result):
    on_disk = json.loads((result.run_dir / "metrics.json").read_text())
    assert result.metrics.latency_ms == on_disk["latency_ms"] > 0
    assert result.metrics["dram_bytes"] == on_disk["dram_bytes"]
    assert isinstance(result.metrics.cycles_total, int)
    assert set(result.metrics) == set(on_disk)
    assert not list(result.run_dir.glob("simulate/*.png"))  # plots only on request


def test_a_bad_override_is_one_user_error():
    with pytest.raises(UserError, match=r"hardware\.frequency_mhzz"):
        api.compose("hardware.frequency_mhzz=5")
    with pytest.raises(UserError):
        api.run("model=mobilenet_v2", "hardware.frequency_mhz=-1")


@pytest.mark.parametrize("point", [
    {"frequency_mhz": 650, "dram.bandwidth_gbps": 5.0},
    {"dispatch_cycles": 1000, "energy.dram_pj_per_byte": 20.0, "dram.latency_ns": 200},
    {"host.gflops": 5.0, "link.bandwidth_gbps": 2.0, "sram.bandwidth_bytes_per_cycle": 16},
    # past the bounds rk3588's calibrate list searches ([4, 34] GB/s, [500, 50000] cycles):
    # those bound a calibration, not a what-if
    {"dram.bandwidth_gbps": 51.2, "dispatch_cycles": 100},
    {"energy.mac_pj.int8": 0.5, "dispatch_cycles": 2000},  # energy per MAC per precision
    {"dram.stream_gbps": 40.0, "dram.bandwidth_gbps": 12.0},  # the classifier's stream
])
def test_the_batch_evaluator_equals_a_full_run_at_each_point(result, point, tmp_path):
    estimate = api.evaluator(result).evaluate(point)
    full = api.run(*BASE, *(f"hardware.{k}={v}" for k, v in point.items()),
                   run_dir=tmp_path / "full").metrics
    assert estimate.placement_held
    assert (estimate.latency_ms, estimate.cycles_total, estimate.energy_mj,
            estimate.dram_bytes) == (full.latency_ms, full.cycles_total, full.energy_mj,
                                     full.dram_bytes)


def test_the_evaluator_refuses_what_would_change_the_plan(result):
    evaluator = api.evaluator(result)
    with pytest.raises(UserError, match=r"sram\.size_kb"):
        evaluator.evaluate({"sram.size_kb": 64})
    with pytest.raises(UserError, match="frequency_mhz"):
        evaluator.evaluate({"frequency_mhz": -5})


@pytest.mark.parametrize(("point", "message"), [
    ({"frequency_mhz": "fast"}, "'frequency_mhz' must be a number, got 'fast'"),
    ({"frequency_mhz": True}, "'frequency_mhz' must be a number, got True"),
    ({"dispatch_cycles": 1.5}, "'dispatch_cycles' is a whole number of cycles, got 1.5"),
    ({"energy.mac_pj": 0.3}, "'energy.mac_pj' changes the plan or is not a profile"),
    ({"energy.mac_pj.int8": -1}, "energy.mac_pj.int8: must be >= 0"),
])
def test_a_point_that_is_not_a_number_of_its_field_s_kind_is_one_user_error(result, point,
                                                                             message):
    with pytest.raises(UserError) as err:
        api.evaluator(result).evaluate(point)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_whole_float_is_the_whole_number_it_names(result):
    evaluator = api.evaluator(result)
    as_float = evaluator.evaluate({"dispatch_cycles": 2000.0})
    assert dataclasses.replace(as_float, point={}) == dataclasses.replace(
        evaluator.evaluate({"dispatch_cycles": 2000}), point={})


def test_two_workers_give_the_same_answers_in_the_same_order(result):
    evaluator = api.evaluator(result)
    points = [{"frequency_mhz": 500 + 50 * i} for i in range(8)]
    assert evaluator.evaluate_many(points, workers=2) == evaluator.evaluate_many(points)
    assert [e.point for e in evaluator.evaluate_many(points, workers=2)] == points
