"""Tiling sweep and INT8-vs-FP16 table (compile + simulate on zoo models, in-process).

    python benchmarks/tiling_precision.py

1. Fixed square tiles (tile_m = tile_n = tile_k = T) on mobilenet_v2 / ethos_u55_256 and
   rk3588: bigger tiles that fit SRAM -> fewer DRAM bytes and a higher SRAM hit rate, the
   shape of the seeds' YOLOv5s table; auto tiling for comparison.
2. INT8 vs FP16 latency and energy on resnet18 on two fp16-capable profiles.
Writes results/tiling_precision.md.
"""

from __future__ import annotations

from _common import REPO, write_result
from omegaconf import OmegaConf

from hardware.profile import load_profile
from ops.load import from_onnx
from pipeline.compiler.driver import compile_graph
from pipeline.compiler.plan import Plan
from pipeline.errors import UserError
from pipeline.simulator.metrics import latency_metrics
from pipeline.simulator.replay import FrameCosts, build
from pipeline.simulator.timeline import schedule
from pipeline.zoo import ZOO

CONF = REPO / "conf"
BASE = OmegaConf.load(CONF / "compile" / "default.yaml")


def run(model: str, profile_name: str, scheme: str = "int8", **compile_cfg) -> dict:
    profile = load_profile(CONF / "hardware" / f"{profile_name}.yaml")
    graph = from_onnx(ZOO[model](seed=0, opset=17))
    plan = Plan.from_json(compile_graph(graph, profile, OmegaConf.merge(BASE, compile_cfg),
                                        scheme))
    tasks = build(plan, profile, 1, 1, FrameCosts(0, 0))
    return latency_metrics(plan, tasks, schedule(tasks), profile)


def tiling_table(model: str, profile: str) -> list[str]:
    lines = [f"### {model} on {profile}: fixed square tiles", "",
             "| tiles | SRAM hit rate | DRAM MB | latency ms | energy mJ |",
             "|---|---|---|---|---|"]
    for t in (8, 16, 32, 64, 128, 256, 512):
        try:
            m = run(model, profile, tiling={"mode": "fixed", "tile_m": t, "tile_n": t,
                                            "tile_k": t})
        except UserError as exc:
            need = str(exc).split("needs ")[1].split(" bytes")[0]
            lines.append(f"| {t}^3 | does not fit (a kernel needs {int(need):,} B of tile "
                         "SRAM) | | | |")
            continue
        lines.append(f"| {t}^3 | {100 * m['sram_hit_rate']:.1f}% | {m['dram_bytes'] / 1e6:.2f} "
                     f"| {m['latency_ms']:.3f} | {m['energy_mj']:.3f} |")
    m = run(model, profile)
    lines.append(f"| auto | {100 * m['sram_hit_rate']:.1f}% | {m['dram_bytes'] / 1e6:.2f} | "
                 f"{m['latency_ms']:.3f} | {m['energy_mj']:.3f} |")
    return [*lines, ""]


def precision_table(model: str, profiles: tuple[str, ...]) -> list[str]:
    lines = [f"### {model}: INT8 vs FP16", "",
             "| profile | int8 ms | fp16 ms | fp16/int8 time | int8 mJ | fp16 mJ | "
             "int8 energy saving | int8 bound mix |", "|---|---|---|---|---|---|---|---|"]
    for p in profiles:
        i8, f16 = run(model, p, "int8"), run(model, p, "fp16")
        lines.append(
            f"| {p} | {i8['latency_ms']:.3f} | {f16['latency_ms']:.3f} | "
            f"{f16['latency_ms'] / i8['latency_ms']:.2f}x | {i8['energy_mj']:.3f} | "
            f"{f16['energy_mj']:.3f} | {100 * (1 - i8['energy_mj'] / f16['energy_mj']):.0f}% | "
            f"util {100 * i8['mac_utilization']:.1f}% |")
    return [*lines, ""]


def main() -> None:
    out = ["# Tiling and precision", ""]
    out += tiling_table("mobilenet_v2", "ethos_u55_256")
    out += tiling_table("mobilenet_v2", "rk3588")
    out += precision_table("resnet18", ("rk3588", "nvdla_full"))
    out += precision_table("mobilenet_v2", ("rk3588", "nvdla_full"))
    text = "\n".join(out)
    write_result("tiling_precision", text)
    print(text)


if __name__ == "__main__":
    main()
