"""The U85's output blocks (hardware/output_blocks.py) against Vela's own per-layer cycles."""

from __future__ import annotations

import json

import pytest

from hardware.output_blocks import blocks_in_plane
from ops.work import ARRAY, GemmShape, Work
from tests.conftest import REPO

SCALE_RATE = 128 * 2 / 500 * 0.8  # the scale channel: two 128-byte bursts, 500 cycles away


def _conv(h: int, w: int, cin: int, cout: int, k: int = 1, groups: int = 1) -> Work:
    g = GemmShape(h * w, cin // groups * k * k, cout // groups, groups, width=w)
    return Work(ARRAY, macs=g.macs, input_elems=h * w * cin,
                weight_elems=k * k * cin // groups * cout, output_elems=h * w * cout, gemm=g)


@pytest.mark.parametrize("profile, accumulator_bytes", [("ethos_u85_256", 16384),
                                                        ("ethos_u85_1024", 65536)])
def test_a_wide_map_re_reads_its_scales_as_often_as_vela_s_blocks_say(profile,
                                                                      accumulator_bytes):
    """MobileNetV2 x0.35's first expansion (8 -> 48 channels at 48x48) is bound by its
    scale words in Vela's per-layer cycles (benchmarks/results/vela_compare.json): 48 x 10
    bytes per block at 0.41 B/cycle. The blocks that implies and npuflow's count agree
    within 15%, on the accumulator RAM of either configuration."""
    record = json.loads((REPO / "benchmarks" / "results" / "vela_compare.json").read_text())
    net = next(r for r in record if r["profile"] == profile
               and r["name"].startswith("MobileNetV2"))
    vela = next(p["vela"]["cycles"] for p in net["layers"]
                if p["vela"] and p["vela"]["macs"] == 48 * 48 * 8 * 48)
    implied = vela * SCALE_RATE / (48 * 10)
    assert blocks_in_plane(_conv(48, 48, 8, 48), accumulator_bytes) == \
        pytest.approx(implied, rel=0.15)


def test_blocks_follow_the_accumulator_ram_and_the_weights():
    """Four times the accumulator RAM never needs more blocks; a fully connected layer and
    a small map are one block; a layer whose weights dwarf its input keeps its plane whole
    and slices its depth instead (regor's cost: weights are fetched once per block in the
    plane, the input once per depth slice)."""
    layers = [_conv(48, 48, 16, 48), _conv(24, 24, 8, 48), _conv(32, 32, 16, 16, 3),
              _conv(12, 12, 96, 96, 3, groups=96)]
    for work in layers:
        assert blocks_in_plane(work, 65536) <= blocks_in_plane(work, 16384)
    assert blocks_in_plane(_conv(1, 1, 1024, 640), 16384) == 1
    assert blocks_in_plane(_conv(3, 3, 320, 1280), 16384) == 1
    assert blocks_in_plane(_conv(48, 48, 16, 48), 16384) > 48 * 48 * 48 * 4 * 2 // 16384
