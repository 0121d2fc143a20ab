"""The DMA-channel unit (hardware/units/dma_channels.py) and units' own profile sections."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pytest
from omegaconf import MISSING

from hardware.bounds import POSITIVE, bounded
from hardware.cost import auto_tiling, npu_kernel_cost
from hardware.memory import Channels
from hardware.profile import ProfileError, load_profile, profile_from_config
from hardware.profile_file import read_profile_yaml
from hardware.units import DMA_MODELS, DmaModel, dram_channels, register
from ops.work import ARRAY, GemmShape, Work
from tests.conftest import CONF, REPO

U85_256 = CONF / "hardware" / "ethos_u85_256.yaml"


def _fc(k: int, n: int) -> Work:
    g = GemmShape(1, k, n)
    return Work(ARRAY, macs=g.macs, input_elems=k, weight_elems=k * n, output_elems=n,
                gemm=g)


def test_a_weight_stream_on_the_u85_moves_at_vela_s_own_per_layer_rate():
    """Vela 5.2.0's per-layer cycles for the CIFAR CNN's fully connected 4096 -> 128 layer
    on ethos-u85-256 (Ethos_U85_SYS_DRAM_Mid, Dedicated_Sram_384KB), recorded by
    benchmarks/vela_compare.py: 160,009 cycles for 512 KiB of weights, 3.3 bytes per cycle
    from a port of 12. npuflow's kernel, bound by its weight channel, lands within 1% of
    it; with the channels taken away it is the port's bytes / 12, 3.3x faster."""
    record = json.loads((REPO / "benchmarks" / "results" / "vela_compare.json").read_text())
    cifar = next(r for r in record if r["profile"] == "ethos_u85_256"
                 and r["name"].startswith("CIFAR"))
    vela = next(pair["vela"]["cycles"] for pair in cifar["layers"]
                if pair["vela"] and pair["vela"]["kind"] == "fc"
                and pair["vela"]["macs"] == 4096 * 128)
    profile = load_profile(U85_256)
    work = _fc(4096, 128)
    cost = npu_kernel_cost(work, "int8", profile, weight_bytes=4096 * 128)
    assert abs(cost.total_cycles / vela - 1) < 0.02
    plain = npu_kernel_cost(work, "int8", dataclasses.replace(profile, units={}),
                            weight_bytes=4096 * 128)
    assert 3.2 < cost.total_cycles / plain.total_cycles < 3.5


def test_little_s_law_sets_each_channel_and_a_faster_clock_lowers_its_bytes_per_cycle():
    """A channel moves burst x in-flight / latency: the U85-256's 2 KB weight buffer holds
    16 bursts of 128 B, each 500 ns away, derated 0.8 (Vela's ChannelBW): 3.2768 B/ns.
    In bytes per cycle that halves at twice the clock, as a DRAM's rate does."""
    profile = load_profile(U85_256)
    work = _fc(64, 128)
    rates = dram_channels(profile, "feature_maps", work, "int8")
    scale_rate = 128 * 2 / 500 * 0.8  # the 16-word (256 B) scale buffer: 2 bursts
    sram = 64 * (16 * 0.8) / 32 * 0.8  # 64 B bursts, 8 x 2 ports in flight, 32 cycles
    assert dataclasses.astuple(rates) == pytest.approx(
        (128 * 16 / 500 * 0.8, 128 * 16 / 500 * 0.8, 128 * (32 * 0.8) / 250 * 0.8,
         128 * 10 / scale_rate, sram, sram))
    fast = dataclasses.replace(profile, frequency_mhz=2000)
    assert dram_channels(fast, "feature_maps", work, "int8").b == pytest.approx(rates.b / 2)
    assert dram_channels(load_profile(CONF / "hardware" / "ethos_u55_256.yaml"),
                         "feature_maps", work, "int8") is None


def test_a_layer_s_scales_and_biases_take_their_own_channel_as_vela_s_do():
    """Vela 5.2 on MLPerf Tiny's ad01 (ethos-u85-1024): each 128 -> 128 fully connected
    layer takes 3,124 cycles, 16,384 MACs and 16 KiB of weights notwithstanding: its 128
    channels' 10-byte scale words come through a channel two 128-byte bursts deep against
    the 500-cycle DRAM (0.41 B/cycle). npuflow's kernel with its maps staged in SRAM lands
    within 20% of it; without the scale channel its weights' 1,560 cycles and one DRAM
    latency would set it."""
    record = json.loads((REPO / "benchmarks" / "results" / "vela_compare.json").read_text())
    ad01 = next(r for r in record if r["profile"] == "ethos_u85_1024"
                and r["name"].startswith("ad01"))
    vela = [pair["vela"]["cycles"] for pair in ad01["layers"]
            if pair["vela"] and pair["vela"]["macs"] == 128 * 128]
    assert vela and all(3100 <= v <= 3300 for v in vela)
    profile = load_profile(CONF / "hardware" / "ethos_u85_1024.yaml")

    def cycles(p):  # tiled as the compiler tiles it, the maps in SRAM
        work = _fc(128, 128)
        tiling = auto_tiling(work, "int8", p, a_in_dram=False, c_to_dram=False).tiling
        return npu_kernel_cost(work, "int8", p, tiling, a_in_dram=False,
                               c_to_dram=False).total_cycles

    assert abs(cycles(profile) / min(vela) - 1) < 0.2
    s = profile.units["dma_channels"]
    no_scales = dataclasses.replace(profile, units={"dma_channels": dataclasses.replace(
        s, scale_buffer_bytes=1 << 20)})
    assert cycles(no_scales) < 0.6 * cycles(profile)


@pytest.mark.parametrize("edit, key", [
    ({"dma_chanels": {}}, "hardware.units.dma_chanels"),
    ({"dma_channels": {"burst_bytes": 0}}, "hardware.units.dma_channels.burst_bytes"),
    ({"dma_channels": {"burst_byte": 128}}, "hardware.units.dma_channels.burst_byte"),
    ({"dma_channels": {"utilisation": 1.5}}, "hardware.units.dma_channels.utilisation"),
])
def test_a_unit_section_is_checked_where_the_profile_is_built(edit, key):
    cfg = read_profile_yaml(U85_256)
    base = dict(cfg["units"]["dma_channels"])
    units = {name: ({**base, **params} if name == "dma_channels" else params)
             for name, params in edit.items()}
    with pytest.raises(ProfileError) as err:
        profile_from_config({**cfg, "units": units})
    assert str(err.value).startswith(key)


def test_a_new_unit_brings_its_section_without_editing_the_profile_schema():
    """What a unit module does to join: a class with its ``Section``, registered. The
    profile then takes its parameters under ``units:``, typed and range-checked, and the
    cost model prices every kernel's streams with it; hardware/profile.py is not touched."""

    @dataclass
    class SlowPortSection:
        bytes_per_cycle: float = bounded(MISSING, POSITIVE)

    @register
    class SlowPort(DmaModel):
        name = "test_slow_port"
        Section = SlowPortSection

        @staticmethod
        def channels(profile, reads, work, precision):
            rate = profile.units["test_slow_port"].bytes_per_cycle
            return Channels(rate, rate, rate)

    try:
        cfg = {**read_profile_yaml(CONF / "hardware" / "ethos_u55_256.yaml"),
               "units": {"test_slow_port": {"bytes_per_cycle": 0.25}}}
        profile = profile_from_config(cfg)
        assert profile.units["test_slow_port"] == SlowPortSection(0.25)
        work = _fc(1024, 64)
        slow = npu_kernel_cost(work, "int8", profile)
        fast = npu_kernel_cost(work, "int8", dataclasses.replace(profile, units={}))
        assert slow.memory_cycles > fast.memory_cycles
        assert slow.memory_cycles >= 4 * 1024 * 64  # the weights at 1/4 byte per cycle
        with pytest.raises(ProfileError, match=r"test_slow_port\.bytes_per_cycle"):
            profile_from_config({**cfg, "units": {"test_slow_port": {"bytes_per_cycle": 0}}})
    finally:
        DMA_MODELS.pop("test_slow_port")
