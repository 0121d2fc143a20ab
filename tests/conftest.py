"""Shared helpers: compose configs through Hydra's API and run the real CLI."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import onnx
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from pipeline import cli
from pipeline.configuration.schema import register_configs

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"
ONNX_LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

register_configs()


def compose_config(*overrides: str, config_dir: Path | None = None) -> DictConfig:
    extra = [f"hydra.searchpath=[file://{config_dir}]"] if config_dir else []
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("config", overrides=[*extra, *overrides], return_hydra_config=False)


def run_cli(*args: str, cwd: Path = REPO, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    if env and "HYDRA_FULL_ERROR" in env:
        full_env["HYDRA_FULL_ERROR"] = env["HYDRA_FULL_ERROR"]
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=600)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.fixture
def light_model():
    def path(name: str) -> Path:
        return ONNX_LIGHT / f"light_{name}.onnx"
    return path


def run_inprocess(*args: str, main: Callable[[], None] | None = None
                  ) -> tuple[int, list[str], str]:
    """A CLI entry point (default: ``npuflow``) run in this process with ``args`` as its
    argv, Hydra composing afresh each time: exit code, non-empty stderr lines, stdout."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["npuflow", *args]
    code = 0
    try:
        with redirect_stdout(out), redirect_stderr(err):
            (main or cli.main)()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:  # an escaped traceback: what this table exists to catch
        code = 1
        err.write(traceback.format_exc())
    finally:
        sys.argv = saved
    return code, [line for line in err.getvalue().splitlines() if line.strip()], out.getvalue()


# -- tiers: `make test` runs everything (CI); `make test-fast` leaves out what is marked slow
# A test is slow when it starts processes or services (the CLI as a subprocess, a Ray
# cluster, DVC, Chromium, torch exports, signal delivery, the wild models' downloads) or
# fits a calibration; the list is by what a test does, read from its module and source,
# so a new test of that kind is marked without anyone remembering to.
SLOW_MODULES = frozenset({"test_cluster", "test_sweeps_dvc", "test_reports", "test_interrupts",
                          "test_reliability", "test_calibrate", "test_wild_models",
                          "test_quant_trained", "test_model_sources", "test_readme_figures"})
SLOW_CALLS = ("run_cli(", "subprocess.", "run_inprocess(\"-m\"", "Popen(")
# in-process, but over full-size networks (zoo counts, the critical-path sweep over every
# profile, ...): more than 2 s each on this 2-core machine (pytest --durations)
SLOW_TESTS = frozenset({
    "test_api::test_a_run_returns_the_cli_s_metrics_typed",
    "test_cache_keys::test_an_edited_metric_is_scored_again",
    "test_cache_keys::test_an_edited_sibling_module_of_a_flat_project_counts",
    "test_cache_keys::test_an_edited_torch_module_is_exported_again",
    "test_export::test_missing_and_non_onnx_files",
    "test_mechanisms::test_a_profile_s_confidence_band_is_reported_with_what_it_rests_on",
    "test_mechanisms::test_an_embedding_lookup_reads_the_rows_it_selects_not_its_table",
    "test_optimize::test_a_broken_pass_is_named_even_among_good_ones",
    "test_optimize::test_bn_disappears_from_conv_bn_relu_and_the_function_holds",
    "test_optimize::test_linear_slim_gives_onnxslims_own_result",
    "test_quantize::test_auto_mixed_precision_meets_a_cosine_target_with_the_fewest_layers",
    "test_quantize::test_digits_accuracy_comes_from_onnxruntime_on_the_held_out_split",
    "test_quantize::test_parallel_calibration_gives_the_sequential_ranges_in_a_stable_file",
    "test_run_folder::test_a_sweep_folder_is_one_sweep",
    "test_runner::test_every_metric_a_stage_returns_is_one_it_declares",
    "test_silicon::test_edge_tpu_caches_parameters_that_fit_and_streams_the_rest_in_order",
    "test_silicon::test_single_buffered_cores_share_the_port_by_the_asymptotic_bound",
    "test_simulate::test_latency_never_beats_the_critical_path_of_kernel_bounds",
    "test_sustained::test_the_pipeline_throttles_a_box_that_cannot_hold_full_speed",
    "test_tflite::test_npuflow_s_own_int8_model_kept_as_is_gives_the_same_figures",
    "test_zoo::test_zoo_matches_published_counts",
})
SLOW_FIXTURES = frozenset({"graphs"})  # test_simulate's: every zoo network built (~25 s)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: starts processes or services, or fits "
                            "(left out by `make test-fast`, run by `make test` and CI)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import inspect

    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        function = getattr(item, "function", None)
        try:
            source = inspect.getsource(function) if function else ""
        except (OSError, TypeError):
            source = ""
        name = f"{module}::{getattr(function, '__name__', '')}"
        if module in SLOW_MODULES or name in SLOW_TESTS \
                or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) \
                or any(call in source for call in SLOW_CALLS):
            item.add_marker(pytest.mark.slow)
