"""Runs inside ZigZag's own venv: one ONNX workload through ZigZag's Python API, JSON out.

Usage: python _zigzag_worker.py MODEL.onnx  ->  prints {"seconds": wall, "layers": [...]}
with, per Conv/Gemm layer, ZigZag's latency terms (cycles), energy (pJ) and DRAM bytes.
The accelerator and mapping are ZigZag's own shipped ``tpu_like`` files, so nothing about
ZigZag's side is npuflow's choice; LOMA searches temporal mappings for minimal latency.
"""

import json
import logging
import os
import sys
import tempfile
import time
from importlib.metadata import version

import zigzag
from zigzag.api import get_hardware_performance_zigzag
from zigzag.hardware.architecture.memory_port import DataDirection

INPUTS = os.path.join(os.path.dirname(zigzag.__file__), "inputs")
ACCELERATOR = os.path.join(INPUTS, "hardware", "tpu_like.yaml")
MAPPING = os.path.join(INPUTS, "mapping", "tpu_like.yaml")
TO_DRAM = (DataDirection.RD_OUT_TO_LOW, DataDirection.WR_IN_BY_LOW)


def dram_bytes(cme) -> float:
    """Words moved between DRAM (the top level of every operand) and the level below it."""
    total = 0.0
    for layer_op, per_level in cme.memory_word_access.items():
        mem_op = cme.memory_operand_links.layer_to_mem_op(layer_op)
        top = cme.accelerator.memory_hierarchy.get_memory_levels(mem_op=mem_op)[-1]
        if len(per_level) < len(cme.accelerator.memory_hierarchy.get_memory_levels(mem_op)):
            continue  # this operand never reaches DRAM
        access = per_level[-1]
        for direction in TO_DRAM:
            bits = top.get_max_bandwidth(mem_op, direction) or 0
            total += access.get(direction) * bits / 8
    return total


def main() -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    with tempfile.TemporaryDirectory() as dump:
        start = time.perf_counter()
        _, _, cmes = get_hardware_performance_zigzag(
            sys.argv[1], ACCELERATOR, MAPPING, opt="latency", dump_folder=dump,
            loma_show_progress_bar=False)
        seconds = time.perf_counter() - start
    layers = []
    for cme, _ in cmes[0][1]:
        layers.append({
            "name": cme.layer.name, "macs": int(cme.layer.total_mac_count),
            "ideal_cycles": float(cme.ideal_cycle),
            "ideal_temporal_cycles": float(cme.ideal_temporal_cycle),
            "stall_cycles": float(cme.stall_slack_comb),
            "onload_cycles": float(cme.data_onloading_cycle),
            "offload_cycles": float(cme.data_offloading_cycle),
            "latency_cycles": float(cme.latency_total2),
            "energy_pj": float(cme.energy_total), "mac_energy_pj": float(cme.mac_energy),
            "memory_energy_pj": float(cme.mem_energy), "dram_bytes": dram_bytes(cme),
            "spatial_mapping": str(cme.layer.spatial_mapping),
        })
    print(json.dumps({"seconds": seconds, "zigzag": version("zigzag-dse"), "layers": layers}))


if __name__ == "__main__":
    main()
