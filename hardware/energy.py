"""Energy: MACs x pJ/MAC at the precision + SRAM bytes x pJ/B + DRAM bytes x pJ/B, plus
static power x time. The per-access figures in the shipped profiles follow Horowitz,
"Computing's energy problem", ISSCC 2014 (45 nm: 8-bit multiply 0.2 pJ + add 0.03 pJ;
fp16 1.1 + 0.4 pJ; fp32 3.7 + 0.9 pJ; 8 KB SRAM 10 pJ / 64 bit; DRAM 1.3-2.6 nJ / 64 bit),
scaled per profile where a profile cites a better source."""

from __future__ import annotations

from hardware.profile_schema import Energy


def dynamic_energy_pj(macs: int, precision: str, sram_bytes: int, dram_bytes: int,
                      energy: Energy) -> float:
    mac_pj = getattr(energy.mac_pj, precision, energy.mac_pj.fp32)
    return macs * mac_pj + sram_bytes * energy.sram_pj_per_byte + \
        dram_bytes * energy.dram_pj_per_byte


def static_energy_pj(seconds: float, energy: Energy) -> float:
    return energy.static_mw * 1e-3 * seconds * 1e12
