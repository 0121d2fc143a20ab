"""The shipped hardware profiles: valid, sourced, different where it matters, documented."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from hardware.fixed_nodes import declare_fixed
from hardware.profile import (
    PRECISIONS,
    ProfileError,
    check_priors,
    load_profile,
    profile_from_config,
    validate,
)
from hardware.profile_file import read_profile_yaml
from pipeline.reports.supported_ops import DOCS, profiles, render
from tests.conftest import CONF, compose_config

PROFILES = {p.name: p for p in profiles()}


def test_every_profile_file_is_named_after_its_profile():
    assert {p.stem for p in (CONF / "hardware").glob("*.yaml")} == set(PROFILES)


def test_at_least_five_sourced_profiles():
    assert len(PROFILES) >= 5
    for p in PROFILES.values():
        assert len(p.based_on) > 80, f"{p.name}: based_on must cite its public source"


def test_profiles_differ_in_what_they_support():
    lacks = {name for name, p in PROFILES.items()
             if "Gelu" not in p.ops or "HardSwish" not in p.ops}
    assert lacks and lacks != set(PROFILES)
    no_resize = {n for n, p in PROFILES.items() if "Resize" not in p.ops}
    no_depthwise = {n for n, p in PROFILES.items() if not p.ops["Conv"].get("depthwise")}
    assert no_resize | no_depthwise
    no_fp16 = {n for n, p in PROFILES.items() if p.mac_array.throughput.fp16 == 0}
    assert no_fp16 and no_fp16 != set(PROFILES)


def test_tpu_v1_peak_is_the_papers_92_tops():
    p = PROFILES["tpu_v1"]
    tops = p.peak_macs_per_cycle["int8"] * 2 * p.frequency_mhz * 1e6 / 1e12
    assert tops == pytest.approx(92, rel=0.01)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_committed_supported_ops_table_is_fresh(name):
    committed = (DOCS / f"{name}.md").read_text()
    assert committed == render(PROFILES[name]), (
        f"docs/supported_ops/{name}.md is stale: run python -m pipeline.reports.supported_ops")


def test_table_shows_the_limits_of_the_profile():
    text = render(PROFILES["ethos_u55_256"])
    assert "| Conv | conv | Kernel height and width must be at most 64; " \
           "Stride must be at most 3" in text
    assert "Gelu" in text.split("placed on the CPU")[1]
    assert "MAC-array precisions: " + ", ".join(
        p for p in PRECISIONS if getattr(PROFILES["ethos_u55_256"].mac_array.throughput, p))\
        in text


def test_supported_ops_help_prints_and_writes_nothing():
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline.reports.supported_ops", *args],
                              capture_output=True, text=True, timeout=120)

    before = {p: p.stat().st_mtime_ns for p in DOCS.glob("*.md")}
    shown_help, unknown, shown = run("--help"), run("--print", "nope"), run("--print", "rk3588")
    assert shown_help.returncode == 0 and "usage:" in shown_help.stdout
    assert unknown.returncode == 2 and "no profile 'nope'" in unknown.stderr
    assert shown.returncode == 0 and shown.stdout == (DOCS / "rk3588.md").read_text()
    assert {p: p.stat().st_mtime_ns for p in DOCS.glob("*.md")} == before


def _family(tmp_path, child: str) -> None:
    (tmp_path / "rk3588.yaml").write_text((CONF / "hardware" / "rk3588.yaml").read_text())
    (tmp_path / "child.yaml").write_text(child)


def test_a_derived_profile_states_only_what_differs(tmp_path):
    _family(tmp_path, "defaults: [rk3588, _self_]\nname: child\ncores: 1\n"
                      "dram: {bandwidth_gbps: 8.5}\n")
    parent, child = load_profile(tmp_path / "rk3588.yaml"), load_profile(tmp_path / "child.yaml")
    assert (child.name, child.cores, child.dram.bandwidth_gbps) == ("child", 1, 8.5)
    assert child.dram.latency_ns == parent.dram.latency_ns  # the rest of a section is kept
    assert child.mac_array == parent.mac_array and child.ops == parent.ops
    # _self_ first: the parent's values win, as in Hydra's composition order
    _family(tmp_path, "defaults: [_self_, rk3588]\nname: child\ncores: 1\n")
    assert load_profile(tmp_path / "child.yaml").cores == parent.cores


@pytest.mark.parametrize("name", sorted(n for n in PROFILES if "defaults:" in
                                        (CONF / "hardware" / f"{n}.yaml").read_text()))
def test_derived_profiles_read_without_hydra_as_hydra_composes_them(name):
    cfg = compose_config(f"hardware={name}")
    assert profile_from_config(cfg.hardware) == PROFILES[name]


@pytest.mark.parametrize("child, culprit", [
    ("defaults: [rk9999]\nname: child\n", "rk9999"),
    ("defaults: [child]\nname: child\n", "cycle (child -> child)"),
    ("defaults: [../rk3588]\nname: child\n", "not a profile beside this file"),
])
def test_a_broken_defaults_list_names_the_file(tmp_path, child, culprit):
    _family(tmp_path, child)
    with pytest.raises(ProfileError) as err:
        load_profile(tmp_path / "child.yaml")
    assert str(tmp_path / "child.yaml") in str(err.value) and culprit in str(err.value)


def test_a_users_profile_may_derive_from_a_shipped_one(tmp_path):
    (tmp_path / "mine.yaml").write_text("defaults: [rk3568, _self_]\nname: mine\n"
                                        "frequency_mhz: 800\n")
    raw = read_profile_yaml(tmp_path / "mine.yaml", [CONF / "hardware"])
    assert (raw.name, raw.frequency_mhz) == ("mine", 800)
    assert raw.dram == OmegaConf.load(CONF / "hardware" / "rk3568.yaml").dram
    assert "defaults" not in raw  # the copy npuflow-calibrate writes stands on its own


CORE_KEYS = ("frequency_mhz", "mac_array", "sram", "dram", "dispatch_cycles", "energy")


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "hardware").glob("*.yaml")))
def test_every_core_value_of_a_shipped_profile_says_where_it_comes_from(name):
    """``provenance`` (structured, checked at load): each core value, or its section, is a
    datasheet figure, the vendor compiler's, a paper's, fitted (on which pairs) or an
    assumption."""
    profile = load_profile(CONF / "hardware" / f"{name}.yaml")
    for key in CORE_KEYS:
        covered = [k for k in profile.provenance if k == key or k.startswith(key + ".")
                   or key.startswith(k + ".")]
        assert covered, f"{name}: no provenance for {key}"


def test_a_provenance_entry_must_name_a_key_and_a_kind(tmp_path):
    text = (CONF / "hardware" / "rk3588.yaml").read_text()
    for bad, culprit in (('  frequency_mhz: "datasheet',
                          '  frequency_mhz: "rumour'),
                         ('  frequency_mhz: "datasheet', '  frequencymhz: "datasheet')):
        path = tmp_path / "p.yaml"
        path.write_text(text.replace(bad, culprit, 1))
        with pytest.raises(ProfileError, match="provenance"):
            load_profile(path)


def test_a_fixed_node_is_known_by_identity_until_it_is_made_writable():
    """A node declared fixed (read-only, a sweep's shared group) is resolved once; if it
    is made writable and changed after all, the next profile is built from its new
    values, not from the remembered ones."""
    node = OmegaConf.create({"hardware": OmegaConf.to_container(
        OmegaConf.load(CONF / "hardware" / "edge_tpu.yaml"))}).hardware
    OmegaConf.set_readonly(node, True)
    declare_fixed(node)
    first = profile_from_config(node)
    assert profile_from_config(node) == first
    OmegaConf.set_readonly(node, False)
    node.frequency_mhz = first.frequency_mhz // 2
    assert profile_from_config(node).frequency_mhz == first.frequency_mhz // 2


def test_calibrate_bounds_bind_a_calibration_not_a_run():
    """A value outside its calibrate entry's bounds is a what-if a run may ask; only a
    calibration, which starts from the value and searches inside the bounds, refuses it,
    naming the entry."""
    profile = load_profile(CONF / "hardware" / "rk3588.yaml")
    faster = dataclasses.replace(profile, dram=dataclasses.replace(profile.dram,
                                                                   bandwidth_gbps=51.2))
    assert validate(faster).dram.bandwidth_gbps == 51.2
    check_priors(profile)
    entry = [f.key for f in profile.calibrate].index("dram.bandwidth_gbps")
    with pytest.raises(ProfileError, match=rf"hardware\.calibrate\[{entry}\].*51\.2 lies "
                                           r"outside \[4(\.0)?, 34(\.0)?\]"):
        check_priors(faster)
