"""Runs inside SCALE-Sim's own venv (it pins numpy < 2.4): one layer per call, JSON out.

Usage: python _scalesim_worker.py LAYERS_JSON  ->  prints a JSON list of
{name, dataflow, rows, cols, total_cycles, stall_cycles, compute_util, seconds}.
Memory is made ideal (huge SRAMs, CALC bandwidth) so total cycles are compute cycles.
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import time

from scalesim.scale_sim import scalesim

CONFIG = """[general]
run_name = npuflow_check

[architecture_presets]
ArrayHeight:    {rows}
ArrayWidth:     {cols}
IfmapSramSzkB:    1048576
FilterSramSzkB:   1048576
OfmapSramSzkB:    1048576
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Bandwidth : 10000
Dataflow : {dataflow}
MemoryBanks:   1
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""


def run_layer(layer: dict, workdir: str) -> dict:
    cfg_path = os.path.join(workdir, "arch.cfg")
    with open(cfg_path, "w") as f:
        f.write(CONFIG.format(**layer))
    topo_path = os.path.join(workdir, f"{layer['name']}.csv")
    with open(topo_path, "w") as f:
        if layer["kind"] == "gemm":
            f.write("Layer, M, N, K,\n")
            f.write(f"{layer['name']}, {layer['m']}, {layer['n']}, {layer['k']},\n")
        else:
            f.write("Layer name, IFMAP height, IFMAP width, Filter height, Filter width, "
                    "Channels, Num filter, Strides,\n")
            f.write(f"{layer['name']}, {layer['ih']}, {layer['iw']}, {layer['kh']}, "
                    f"{layer['kw']}, {layer['c']}, {layer['n']}, {layer['stride']},\n")
    layout_path = os.path.join(workdir, "layout.csv")  # required, unused without custom layout
    with open(layout_path, "w") as f:
        f.write("Layer name, a, b, c, d, e, f, g,\n" f"{layer['name']}, 1, 1, 1, 1, 1, 1, 1,\n")
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        sim = scalesim(save_disk_space=True, verbose=False, config=cfg_path,
                       topology=topo_path, layout=layout_path,
                       input_type_gemm=layer["kind"] == "gemm")
        sim.run_scale(top_path=workdir)
    seconds = time.perf_counter() - start
    single = sim.runner.single_layer_sim_object_list[0]
    return {**layer, "total_cycles": int(single.total_cycles),
            "stall_cycles": int(single.stall_cycles),
            "compute_util": float(single.compute_util), "seconds": seconds}


def main() -> None:
    with open(sys.argv[1]) as f:
        layers = json.load(f)
    out = []
    with tempfile.TemporaryDirectory() as workdir:
        for layer in layers:
            out.append(run_layer(layer, workdir))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
