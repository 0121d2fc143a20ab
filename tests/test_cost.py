"""The cost model: SCALE-Sim's closed forms, traffic under tiling, and physical bounds."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hardware.channel_padding import pad_gemm
from hardware.cost import (
    WIDTHS,
    auto_tiling,
    gemm_bytes_per_cycle,
    host_kernel_cost,
    npu_kernel_cost,
)
from hardware.energy import dynamic_energy_pj
from hardware.memory import OperandBytes, Tiling, gemm_traffic, overlap, refetch_factor
from hardware.profile import load_profile
from hardware.systolic import compute_cycles
from hardware.units.dma_channels import DmaChannelsSection
from ops.work import ARRAY, GemmShape, Work
from tests.conftest import CONF

RK = load_profile(CONF / "hardware" / "rk3588.yaml")

# SCALE-Sim v3 total cycles measured with benchmarks/_scalesim_worker.py (ideal memory);
# SCALE-Sim reports the index of the last busy cycle, one less than the cycle count.
SCALESIM = [  # (M, K, N, rows, cols, dataflow, scalesim total cycles)
    (100, 50, 70, 32, 32, "ws", 1163), (100, 50, 70, 32, 32, "os", 1343),
    (100, 50, 70, 32, 32, "is", 1311), (64, 64, 64, 32, 16, "ws", 1135),
    (64, 64, 64, 32, 16, "os", 879), (64, 64, 64, 32, 16, "is", 1135),
    (196, 72, 20, 32, 32, "ws", 869), (64, 72, 20, 32, 32, "ws", 473),
]


@pytest.mark.parametrize(("m", "k", "n", "rows", "cols", "df", "ref"), SCALESIM)
def test_systolic_cycles_match_scalesim(m, k, n, rows, cols, df, ref):
    est = compute_cycles(GemmShape(m, k, n), rows, cols, df)
    assert est.cycles == ref + 1


def test_lower_precision_throughput_stretches_only_the_stream():
    g = GemmShape(1000, 32, 32)
    full, half = compute_cycles(g, 32, 32, "ws"), compute_cycles(g, 32, 32, "ws", 0.5)
    assert half.cycles - full.cycles == 1000  # T doubles; fill/drain do not
    with pytest.raises(ValueError, match="throughput 0"):
        compute_cycles(g, 32, 32, "ws", 0.0)


def test_depthwise_on_the_array_wastes_it():
    dw = compute_cycles(GemmShape(784, 9, 1, groups=96), 32, 32, "ws")
    assert dw.mapping_efficiency == pytest.approx(9 / 1024)


def test_refetch_follows_the_loop_order():
    trips = {"m": 4, "n": 3, "k": 2}
    assert refetch_factor("mnk", "a", trips) == 3  # A(m,k) refetched per n-tile
    assert refetch_factor("mnk", "b", trips) == 4  # B(k,n) refetched per m-tile
    assert refetch_factor("mnk", "c", trips) == 1  # C accumulates over inner k
    assert refetch_factor("kmn", "c", trips) == 2  # k outside C: partial sums spill


def test_traffic_is_compulsory_when_tiles_hold_everything():
    g = GemmShape(256, 128, 64)
    sizes = OperandBytes(a=256 * 128, b=128 * 64, c=256 * 64, c_elems=256 * 64)
    whole = gemm_traffic(g, Tiling(256, 64, 128), sizes)
    assert whole.total == sizes.a + sizes.b + sizes.c and whole.bursts == 3
    tiled = gemm_traffic(g, Tiling(64, 32, 128, "mnk"), sizes)
    assert tiled.a == sizes.a * 2 and tiled.b == sizes.b * 4 and tiled.c == sizes.c
    spilled = gemm_traffic(g, Tiling(256, 64, 32, "kmn"), sizes)
    assert spilled.c == sizes.c + (4 - 1) * 2 * sizes.c_elems * 4


def test_double_buffering_overlaps_single_buffer_adds():
    assert overlap(1000, 600, True, 50) == 1050
    assert overlap(1000, 1600, True, 50) == 1600
    assert overlap(1000, 600, False, 50) == 1600


# Horowitz, "Computing's energy problem", ISSCC 2014, 45 nm: a multiply plus an add (pJ)
HOROWITZ_MAC_PJ = {"int8": 0.2 + 0.03, "fp16": 1.1 + 0.4, "fp32": 3.7 + 0.9}


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "hardware").glob("*.yaml")))
def test_every_profile_s_mac_energy_is_its_cited_source_s(name):
    """Against the paper the energy model cites (hardware/energy.py), not against the
    formula: a profile that drifts from it, or a precision mapped to the wrong figure,
    fails here."""
    energy = load_profile(CONF / "hardware" / f"{name}.yaml").energy
    for precision, pj in HOROWITZ_MAC_PJ.items():
        assert getattr(energy.mac_pj, precision) == pytest.approx(pj), precision
        assert dynamic_energy_pj(10**6, precision, 0, 0, energy) == pytest.approx(10**6 * pj)


def test_host_roofline_takes_the_slower_side():
    work = Work(ARRAY, macs=10**9, input_elems=10, output_elems=10)
    cost = host_kernel_cost(work, RK)
    assert cost.total_cycles == math.ceil(2e9 / 50e9 * 1e9)  # 40 ms at 1 GHz
    assert cost.bound == "compute"


def _profile(bw: float = 17.0, sram_kb: float = 1024, rows: int = 32, cols: int = 32,
             db: bool = True):
    return dataclasses.replace(
        RK, dram=dataclasses.replace(RK.dram, bandwidth_gbps=bw),
        sram=dataclasses.replace(RK.sram, size_kb=sram_kb),
        mac_array=dataclasses.replace(RK.mac_array, rows=rows, cols=cols),
        dma=dataclasses.replace(RK.dma, double_buffering=db))


gemms = st.builds(GemmShape, st.integers(1, 4096), st.integers(1, 2048), st.integers(1, 2048),
                  st.sampled_from([1, 1, 1, 4, 32]))


channel_sections = st.one_of(st.none(), st.builds(
    lambda burst, reads, writes, wlat, fm, w, scale: DmaChannelsSection(
        burst_bytes=burst, outstanding_reads=reads, outstanding_writes=writes,
        write_latency_ns=wlat, feature_map_buffer_bytes=fm, stream_buffer_bytes=fm,
        weight_buffer_bytes=w, scale_buffer_bytes=scale, scale_bytes_per_channel=10,
        sram_burst_bytes=64, sram_outstanding_reads=reads, sram_outstanding_writes=writes,
        sram_latency_ns=32, accumulator_bytes=16384),
    st.sampled_from([16, 64, 128]), st.integers(1, 64), st.integers(1, 64),
    st.floats(1, 1000), st.sampled_from([256, 2048, 8192]), st.sampled_from([256, 2048]),
    st.sampled_from([256, 4096])))


def _work(g: GemmShape) -> Work:
    return Work(ARRAY, macs=g.macs, input_elems=g.m * g.k * g.groups,
                weight_elems=g.k * g.n * g.groups, output_elems=g.m * g.n * g.groups, gemm=g)


@settings(max_examples=150, deadline=None)
@given(gemms, st.sampled_from(["int8", "int16", "fp16"]), st.floats(0.5, 64),
       st.sampled_from([64, 256, 1024]), st.booleans(), channel_sections)
def test_no_kernel_beats_peak_compute_or_dram_bandwidth(g, prec, bw, sram_kb, db, channels):
    p = _profile(bw=bw, sram_kb=sram_kb, db=db)
    p = dataclasses.replace(p, units={"dma_channels": channels} if channels else {})
    work = _work(g)
    choice = auto_tiling(work, prec, p)
    cost = npu_kernel_cost(work, prec, p, tiling=choice.tiling)
    peak = p.mac_array.rows * p.mac_array.cols * getattr(p.mac_array.throughput, prec)
    assert cost.total_cycles >= g.macs / peak
    # a matrix-vector product's bytes at the profile's stream rate, the others' at its tiles'
    assert cost.total_cycles >= cost.compulsory_dram_bytes / gemm_bytes_per_cycle(g.m, p)
    assert cost.dram_bytes >= cost.compulsory_dram_bytes


@settings(max_examples=100, deadline=None)
@given(gemms, st.floats(0.5, 32), st.floats(1.01, 4.0), st.sampled_from([32, 128, 512]))
def test_more_bandwidth_or_sram_never_slows_a_kernel(g, bw, factor, sram_kb):
    work = _work(g)

    def cycles(p):
        return npu_kernel_cost(work, "int8", p, tiling=auto_tiling(work, "int8", p).tiling
                               ).total_cycles

    assert cycles(_profile(bw=bw * factor, sram_kb=sram_kb)) <= cycles(
        _profile(bw=bw, sram_kb=sram_kb))
    assert cycles(_profile(bw=bw, sram_kb=sram_kb * 2)) <= cycles(
        _profile(bw=bw, sram_kb=sram_kb))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 8),
       st.sampled_from(["ws", "os", "is"]), st.sampled_from([8, 16, 32]))
def test_bigger_array_never_slower_when_the_layer_fills_it(fr, fc, tf, df, base):
    """A bigger systolic array has longer fill/drain paths, so it *can* be slower on a
    small layer (SCALE-Sim shows the same). It is never slower when the layer fills the
    bigger array and streams for at least its fill time."""
    big = 2 * base
    sr, sc, t = fr * big, fc * big, tf * 4 * big
    g = {"ws": GemmShape(t, sr, sc), "os": GemmShape(sr, t, sc), "is": GemmShape(sc, sr, t)}[df]
    assert compute_cycles(g, big, big, df).cycles <= compute_cycles(g, base, base, df).cycles


def test_a_bigger_array_can_lose_on_a_tiny_layer():
    g = GemmShape(1, 32, 32)  # one token through a 32x32 weight
    assert compute_cycles(g, 64, 64, "ws").cycles > compute_cycles(g, 32, 32, "ws").cycles


def test_sram_budget_is_respected_and_overflow_is_reported():
    work = _work(GemmShape(3136, 576, 128))
    choice = auto_tiling(work, "int8", RK, sram_bytes=64 * 1024)
    assert choice.fits and choice.footprint <= 64 * 1024
    tiny = auto_tiling(work, "int8", RK, sram_bytes=100)
    assert not tiny.fits


@given(cin=st.integers(1, 300), taps=st.sampled_from([1, 4, 9, 25, 36]),
       n=st.integers(1, 300), alignment=st.sampled_from([1, 8, 16, 32]),
       tap_channels=st.sampled_from([0, 16, 32, 64]))
def test_channel_padding_never_loses_work_and_atoms_only_add_compute(
        cin, taps, n, alignment, tap_channels):
    """What is stored is the layout's multiple; what the array computes holds every tap's
    channels as whole atoms (never less than stored, equal when the atom is no wider than
    the layout's block); the bytes follow the stored form only."""
    g = GemmShape(m=100, k=cin * taps, n=n)
    padded = pad_gemm(g, alignment, tap_channels, conv_in_channels=cin)
    assert padded.stored.k % (alignment * taps) == 0 and padded.stored.n % alignment == 0
    assert g.k <= padded.stored.k <= padded.computed.k
    assert padded.computed.k == -(-cin // max(alignment, tap_channels)) * \
        max(alignment, tap_channels) * taps
    assert (padded.computed == padded.stored) == (padded.computed.k == padded.stored.k)
    assert padded.input_scale == padded.stored.k / g.k
    channels = cin + 1  # depthwise: one group per channel, at least two
    depthwise = pad_gemm(GemmShape(m=100, k=taps, n=1, groups=channels), alignment,
                         tap_channels, conv_in_channels=channels)
    assert depthwise.computed.groups % alignment == 0 and depthwise.computed.k == taps


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 600), st.integers(1, 2400), st.integers(1, 4),
       st.booleans(), st.booleans(), st.sampled_from(["cycles", "energy", "edp"]),
       st.integers(1 << 12, 1 << 22))
def test_the_tiling_search_shortcut_is_the_grid_s_own_answer(m, n, k, groups, a_moves,
                                                              c_moves, objective, budget):
    """``search`` answers a single-buffered GEMM that fits with the full tile, without the
    grid: the grid itself must pick exactly that (tiling, bytes, bursts) or, when it does
    not fit, the two must agree anyway."""
    from hardware.tiling import grid_search, search

    sizes = OperandBytes(a=m * k * groups if a_moves else 0, b=k * n * groups,
                         c=m * n * groups if c_moves else 0, c_elems=m * n * groups)
    args = (m, n, k, groups, sizes, 1, 1, 4, budget, False, 8.0, 100.0, m * n * k // 512,
            objective, 1.0)
    assert search(*args) == grid_search(*args)


@settings(max_examples=120, deadline=None)
@given(gemms, st.sampled_from(["int8", "int16", "fp16"]), st.floats(0.5, 64),
       st.sampled_from([16, 64, 256, 1024]), st.booleans(), st.floats(0, 2000),
       st.sampled_from(["cycles", "energy", "edp"]), st.sampled_from([2, 8, 64, 512]),
       channel_sections)
def test_the_tiler_ranks_tilings_by_the_cost_model_s_own_time(g, prec, bw, sram_kb, db,
                                                             latency_ns, objective, port,
                                                             channels):
    """One latency function: the tiling the tiler picks costs, in ``npu_kernel_cost``,
    exactly the cycles and bytes the tiler said; and for the cycles objective no other
    tiling that fits costs less there (checked on a sample of the grid, in the cost
    model, not the tiler). Profiles with and without DMA channels of their own."""
    from hardware.memory import ORDERS, sram_footprint
    from hardware.tiling import candidates

    p = _profile(bw=bw, sram_kb=sram_kb, db=db)
    p = dataclasses.replace(p, dram=dataclasses.replace(p.dram, latency_ns=latency_ns),
                            sram=dataclasses.replace(p.sram, bandwidth_bytes_per_cycle=port),
                            units={"dma_channels": channels} if channels else {})
    work = _work(g)
    choice = auto_tiling(work, prec, p, objective)
    cost = npu_kernel_cost(work, prec, p, tiling=choice.tiling)
    assert choice.cycles == cost.total_cycles - cost.overhead_cycles
    assert choice.dram_bytes == cost.dram_bytes
    if objective != "cycles" or not choice.fits:
        return
    act_w, wt_w, acc_w = WIDTHS[prec]
    budget = int(p.sram.size_kb * 1024)
    for tm in candidates(g.m)[::3]:
        for tn in candidates(g.n)[::3]:
            for tk in candidates(g.k)[::3]:
                for order in ORDERS[::2]:
                    t = Tiling(int(tm), int(tn), int(tk), order)
                    if sram_footprint(t, g, act_w, wt_w, acc_w, db) <= budget:
                        other = npu_kernel_cost(work, prec, p, tiling=t)
                        assert other.total_cycles >= cost.total_cycles


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "hardware").glob("*.yaml")))
def test_exactly_one_registered_unit_runs_each_kind_of_kernel(name):
    """The units in hardware/units/ are found without a list anywhere (a module is a
    unit), and on every shipped profile each kind of work, depthwise or not, has exactly
    one unit that claims it: a new unit that overlaps an old one fails here."""
    from hardware.units import UNITS, Operands, output_stages, unit_for

    assert {"array", "vector", "depthwise_engine", "memory", "free", "host"} <= set(UNITS)
    assert [s.name for s in output_stages()] == ["lut_epilogue"]
    profile = load_profile(CONF / "hardware" / f"{name}.yaml")
    g = GemmShape(64, 9, 1, groups=32)
    for kind in ("array", "vector", "memory", "free"):
        for depthwise in (False, True):
            work = Work(kind, macs=g.macs, input_elems=100, output_elems=100,
                        weight_elems=9 * 32, vector_ops=100, gemm=g)
            unit = unit_for(work, profile, depthwise and kind == "array")
            cost = npu_kernel_cost(work, "int8", profile,
                                   depthwise=depthwise and kind == "array")
            assert cost.unit in UNITS and UNITS[cost.unit].lane.startswith("npu.")
            assert unit.cost(work, "int8", profile, Operands()).total_cycles == \
                cost.total_cycles  # no output stage applies to this work
