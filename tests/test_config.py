"""Every config composes; a broken hardware profile fails at compose time naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra.errors import ConfigCompositionException

from hardware.profile import ProfileError, load_profile, profile_from_config
from pipeline.configuration.config import check_complete
from pipeline.errors import UserError
from tests.conftest import CONF, compose_config, error_lines, run_cli

GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir())


def _choices():
    for group in GROUPS:
        for yml in sorted((CONF / group).glob("*.yaml")):
            yield group, yml.stem


@pytest.mark.parametrize(("group", "choice"), list(_choices()))
def test_every_yaml_of_every_group_composes(group, choice):
    if group == "experiment":  # presets are appended: +experiment=NAME
        cfg = compose_config(f"+experiment={choice}")
        check_complete(cfg, {})
        return
    cfg = compose_config(f"{group}={choice}")
    if group == "data" and "path: null" in (CONF / group / f"{choice}.yaml").read_text():
        # a data source the user must point at: composes, then the door asks for the path
        with pytest.raises(UserError, match=rf"^data/{choice}.yaml: data.path: missing"):
            check_complete(cfg, {group: choice})
        return
    check_complete(cfg, {group: choice})
    if not (CONF / group / f"{choice}.yaml").read_text().startswith("# @package _global_"):
        assert cfg[group] is not None


def test_groups_cover_the_design_card():
    assert {"model", "hardware", "quant", "compile", "data", "stages"} <= set(GROUPS)


def _write_profile(tmp_path: Path, edit) -> Path:
    profile = yaml.safe_load((CONF / "hardware" / "rk3588.yaml").read_text())
    profile["name"] = "bad"
    edit(profile)
    (tmp_path / "hardware").mkdir(exist_ok=True)
    path = tmp_path / "hardware" / "bad.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


def test_wrong_type_fails_at_compose_naming_the_key(tmp_path):
    _write_profile(tmp_path, lambda p: p["dram"].update(bandwidth_gbps="fast"))
    with pytest.raises(ConfigCompositionException) as info:
        compose_config("hardware=bad", config_dir=tmp_path)
    assert "ValidationError" in str(info.value)
    assert "full_key: hardware.dram.bandwidth_gbps" in str(info.value)


def test_unknown_key_fails_at_compose_naming_the_key(tmp_path):
    _write_profile(tmp_path, lambda p: p["sram"].update(size_kbb=512))
    with pytest.raises(ConfigCompositionException) as info:
        compose_config("hardware=bad", config_dir=tmp_path)
    assert "Key 'size_kbb' not in 'Sram'" in str(info.value)
    assert "full_key: hardware.sram.size_kbb" in str(info.value)


def test_missing_key_fails_after_compose_naming_the_key(tmp_path):
    _write_profile(tmp_path, lambda p: p["dram"].pop("latency_ns"))
    cfg = compose_config("hardware=bad", config_dir=tmp_path)
    with pytest.raises(UserError, match=r"hardware/bad.yaml: .*'hardware.dram.latency_ns'"):
        check_complete(cfg, {"hardware": "bad"})


@pytest.mark.parametrize(("edit", "key"), [
    (lambda p: p["dram"].update(bandwidth_gbps="fast"), "hardware.dram.bandwidth_gbps"),
    (lambda p: p["sram"].update(size_kbb=512), "hardware.sram.size_kbb"),
    (lambda p: p["dram"].pop("latency_ns"), "hardware.dram.latency_ns"),
    (lambda p: p["mac_array"].update(rows=0), "hardware.mac_array.rows"),
    (lambda p: p["dram"].update(bandwidth_gbps=-1), "hardware.dram.bandwidth_gbps"),
    (lambda p: p["dram"].update(bandwidth_gbps=0), "hardware.dram.bandwidth_gbps"),
    (lambda p: p["sram"].update(size_kb=0), "hardware.sram.size_kb"),
    (lambda p: p["sram"].update(size_kb=-64), "hardware.sram.size_kb"),
])
def test_cli_reports_profile_errors_in_one_line(tmp_path, edit, key):
    _write_profile(tmp_path, edit)
    proc = run_cli("--config-dir", str(tmp_path), "hardware=bad",
                   f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    lines = error_lines(proc)
    assert len(lines) == 1, proc.stderr
    assert key in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_full_error_env_shows_the_traceback(tmp_path):
    _write_profile(tmp_path, lambda p: p["mac_array"].update(rows=0))
    proc = run_cli("--config-dir", str(tmp_path), "hardware=bad",
                   f"hydra.run.dir={tmp_path / 'run'}", env={"HYDRA_FULL_ERROR": "1"})
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_plain_yaml_profile_loads_without_hydra(tmp_path):
    good = load_profile(CONF / "hardware" / "rk3588.yaml")
    assert good.peak_macs_per_cycle["int8"] == 3 * 32 * 32
    bad = _write_profile(tmp_path, lambda p: p["sram"].update(size_kb=0))
    with pytest.raises(ProfileError, match=r"bad.yaml.sram.size_kb: must be > 0"):
        load_profile(bad)


def test_profile_from_plain_dict_rejects_bad_dataflow():
    profile = yaml.safe_load((CONF / "hardware" / "rk3588.yaml").read_text())
    profile["mac_array"]["dataflow"] = "rs"
    with pytest.raises(ProfileError, match=r"hardware.mac_array.dataflow: Invalid value 'rs', "
                                           r"expected one of \[ws, os, is\]"):
        profile_from_config(profile)


def test_bad_override_is_one_line():
    proc = run_cli("no_such_key.x=1")
    assert proc.returncode == 2
    assert error_lines(proc) == [
        "npuflow: error: config error at 'no_such_key': Key 'no_such_key' not in "
        "'NpuflowConfig' [Could not override 'no_such_key.x'. To append to your config use "
        "+no_such_key.x=1]"
    ]


def test_unknown_group_option_lists_the_choices():
    proc = run_cli("hardware=nope")
    assert proc.returncode == 2
    (line,) = error_lines(proc)
    assert "hardware/nope" in line and "rk3588" in line
