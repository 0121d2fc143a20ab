"""Regenerate the README's example figures; fail when one has drifted.

Every number the README quotes from an example's output is tied here to the command that
makes it (which must appear in the README word for word) and to the artifact it is read
from (metrics.json, a sweep's summary.csv, sustained.csv, the composed config). The check
runs each command as a user would, in a scratch folder, and compares each figure as the
README prints it (same rounding); ``--write`` puts the new figures into the README and
copies the example's plot to docs/. A figure the README states without a command
(benchmark results, published figures) is not the business of this script: those come
from benchmarks/ and RESULTS.md.

    python docs/readme_figures.py            # exit 1 naming every drifted figure
    python docs/readme_figures.py --write    # rewrite them (and docs/sustained_rk3588.png)

One file of ~330 lines: one small reader per README example, each next to the command
it checks, so an example and its check are edited together.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


@dataclass
class Run:
    """What an example's command left: a run folder or a sweep folder."""
    folder: Path

    def metrics(self, job: str | None = None) -> dict[str, Any]:
        base = self.folder / job if job else self.folder
        return json.loads((base / "metrics.json").read_text())

    def config(self, job: str | None = None) -> dict[str, Any]:
        base = self.folder / job if job else self.folder
        return yaml.safe_load((base / ".hydra" / "config.yaml").read_text())

    def plan(self) -> dict[str, Any]:
        return json.loads((self.folder / "compile" / "plan.json").read_text())

    def csv(self, name: str) -> list[dict[str, str]]:
        with (self.folder / name).open(newline="") as f:
            return list(csv.DictReader(f))


@dataclass
class Figure:
    """``pattern`` finds the figure(s) in the README, one regex group each (``\\s+`` where
    the README may wrap a line); ``value`` gives the same groups' text from the run."""
    name: str
    pattern: str
    value: Callable[[Run], tuple[str, ...]]


@dataclass
class Example:
    name: str
    command: str  # as the README shows it, `python -m pipeline ...`
    figures: list[Figure]
    multirun: bool = False
    plot: tuple[str, str] | None = None  # (file in the run, file in the repo) for --write


def _tflite(run: Run) -> dict[str, Any]:
    return run.metrics()


def _layers_paired(run: Run) -> str:
    return str(sum(1 for r in run.csv("quantize/layers.csv") if r["cosine"]))


def _sustained_rows(run: Run) -> list[dict[str, float]]:
    return [{k: float(v) for k, v in r.items()} for r in run.csv("simulate/sustained.csv")]


def _settle_c(run: Run) -> str:
    """Where the box would settle at the full clock: the thermal node's steady state
    (``hardware.thermal.steady_state_c``) at the first second's power."""
    from omegaconf import OmegaConf

    from hardware.profile import profile_from_config
    from hardware.thermal import steady_state_c

    cfg = OmegaConf.load(run.folder / ".hydra" / "config.yaml")
    first = next(r for r in _sustained_rows(run) if r["power_w"] > 0)
    thermal = profile_from_config(cfg.hardware).thermal
    return f"{steady_state_c(first['power_w'], cfg.simulate.sustained.ambient_c, thermal):.0f}"


def _onset(run: Run) -> tuple[str, str, str]:
    cfg, rows = run.config(), _sustained_rows(run)
    trip = cfg["hardware"]["thermal"]["trips"][0]
    return (f"{run.metrics()['throttle_onset_s']:.0f}", f"{trip['temperature_c']:g}",
            f"{rows[-1]['frequency_mhz']:.0f}")


def _power(run: Run) -> tuple[str, str]:
    first = next(r for r in _sustained_rows(run) if r["power_w"] > 0)
    return f"{first['power_w']:.2f}", f"{run.metrics()['sustained_power_w']:.2f}"


def _modes(mode: str) -> Callable[[Run], tuple[str, ...]]:
    """One row of the power-mode table: the mode's clock (and voltage), latency, sustained
    latency and power at 25 C ambient, peak temperature at 25 and 45 C."""
    def value(run: Run) -> tuple[str, ...]:
        rows = {(r["overrides"].split("power_mode=")[1].split()[0],
                 r["overrides"].split("ambient_c=")[1].split()[0]): r
                for r in run.csv("summary.csv")}
        cool, hot = rows[(mode, "25")], rows[(mode, "45")]
        spec = run.config(cool["job"])["hardware"]["power_modes"][mode]
        clock = (f"{spec['frequency_mhz']:.0f}",)
        if spec.get("voltage_scale", 1.0) != 1.0:  # the README names a voltage only if scaled
            clock += (f"{spec['voltage_scale']:.2f}",)
        return (*clock, f"{float(cool['latency_ms']):.3f}",
                f"{float(cool['sustained_latency_ms']):.3f}",
                f"{float(cool['sustained_power_w']):.3f}",
                f"{float(cool['peak_temperature_c']):.1f}",
                f"{float(hot['peak_temperature_c']):.1f}")
    return value


def _no_throttle(run: Run) -> tuple[str]:
    onsets = [r["throttle_onset_s"] for r in run.csv("summary.csv") if r["throttle_onset_s"]]
    return ("never" if not onsets else f"{len(onsets)} points throttle",)


def _grid(run: Run) -> list[dict[str, Any]]:
    out = []
    for r in run.csv("summary.csv"):
        point = dict(kv.split("=", 1) for kv in r["overrides"].split())
        out.append({**r, **point, "latency": float(r["latency_ms"]) if r["latency_ms"] else None})
    return out


def _tiles(run: Run) -> tuple[str, ...]:
    int8 = [p for p in _grid(run) if p["quant"] == "int8" and p["latency"] is not None]
    slow, fast = max(int8, key=lambda p: p["latency"]), min(int8, key=lambda p: p["latency"])
    tiles = ("compile.tiling.tile_m", "compile.tiling.tile_n")
    return (f"{slow['latency']:.2f}", *(slow[t] for t in tiles),
            f"{fast['latency']:.2f}", *(fast[t] for t in tiles))


def _proxy(run: Run) -> tuple[str, str]:
    best = {q: max(float(p["output_cosine"]) for p in _grid(run) if p["quant"] == q)
            for q in ("fp16", "int8")}
    return f"{best['fp16']:.4f}", f"{best['int8']:.4f}"


def _fp16_cost(run: Run) -> tuple[str, ...]:
    """The fastest fp16 point over the fastest int8 one, and how many fp16 points the front
    holds ("no" for none, as the README words it)."""
    grid = _grid(run)
    fastest = {q: min(p["latency"] for p in grid if p["quant"] == q and p["latency"])
               for q in ("fp16", "int8")}
    on_front = sum(1 for p in grid if p["quant"] == "fp16" and p["pareto"] == "True")
    return f"{fastest['fp16'] / fastest['int8']:.1f}", "no" if not on_front else str(on_front)


EXAMPLES = [
    Example(
        "tflite",
        "python -m pipeline model=tflite "
        "model.path=benchmarks/models/mlperf_tiny/pretrainedResnet_quant.tflite "
        "model.float_path=benchmarks/models/mlperf_tiny/pretrainedResnet.tflite "
        "hardware=ethos_u55_256",
        [Figure("cycles_total", r"\| cycles_total \| ([\d,]+) \(",
                lambda r: (f"{_tflite(r)['cycles_total']:,}",)),
         Figure("latency band", r"\| ([\d.]+) - ([\d.]+) ms \(the band of the profile's (\d+) "
                r"check pairs",
                lambda r: (f"{_tflite(r)['latency_ms_low']:.3f}",
                           f"{_tflite(r)['latency_ms_high']:.3f}",
                           str(_tflite(r)["latency_band_pairs"]))),
         Figure("ops on the NPU", r"\| ops on the NPU, int8 \| (\d+) of (\d+) \|",
                lambda r: (str(_tflite(r)["npu_ops"]),
                           str(_tflite(r)["npu_ops"] + _tflite(r)["cpu_ops"]))),
         Figure("weights_dram_bytes", r"\| weights_dram_bytes \| ([\d,]+) \(the file's int8 "
                r"weights compressed, ([\d,]+) bytes",
                lambda r: (f"{_tflite(r)['weights_dram_bytes']:,}",
                           f"{r.plan()['memory']['weight_bytes']:,}")),
         Figure("output_cosine, top1_agreement", r"vs the float file \| ([\d.]+), ([\d.]+) \|",
                lambda r: (f"{_tflite(r)['output_cosine']:.3f}",
                           f"{_tflite(r)['top1_agreement']:.2f}")),
         Figure("min_layer_cosine", r"\| min_layer_cosine \((\d+) layers paired\) \| ([\d.]+) \|",
                lambda r: (_layers_paired(r), f"{_tflite(r)['min_layer_cosine']:.3f}"))]),
    Example(
        "sustained",
        "python -m pipeline model=mobilenet_v2 hardware=rk3588 simulate.sustained.seconds=600 "
        "simulate.sustained.ambient_c=45 hardware.thermal.resistance_c_per_w=18 "
        "hardware.thermal.capacity_j_per_c=3",
        [Figure("steady state at full clock", r"it\s+would\s+settle\s+at\s+(\d+)\s+C",
                lambda r: (_settle_c(r),)),
         Figure("throttle onset, trip, clock",
                r"at\s+(\d+)\s+s\s+the\s+temperature\s+reaches\s+the\s+(\d+)\s+C\s+trip\s+point,"
                r"\s+the\s+NPU\s+steps\s+to\s+(\d+)\s+MHz", _onset),
         Figure("settled temperature", r"temperature\s+settles\s+at\s+~(\d+)\s+C",
                lambda r: (f"{r.metrics()['peak_temperature_c']:.0f}",)),
         Figure("latency", r"latency\s+goes\s+from\s+([\d.]+)\s+ms\s+to\s+([\d.]+)\s+ms",
                lambda r: (f"{r.metrics()['latency_ms']:.2f}",
                           f"{r.metrics()['sustained_latency_ms']:.2f}")),
         Figure("power", r"power\s+from\s+([\d.]+)\s+W\s+to\s+([\d.]+)\s+W", _power)],
        plot=("simulate/sustained.png", "docs/sustained_rk3588.png")),
    Example(
        "power modes",
        "python -m pipeline -m hydra/launcher=pool hardware=rk3588 "
        "simulate.sustained.seconds=600 simulate.sustained.power_mode=performance,balanced,"
        "powersave simulate.sustained.ambient_c=25,45",
        [Figure(f"{mode} row", rf"\| {mode} \((\d+) MHz{volts}\) \| ([\d.]+) \| ([\d.]+) \| "
                r"([\d.]+) \| ([\d.]+) / ([\d.]+) \|", _modes(mode))
         for mode, volts in (("performance", ""), ("balanced", r", ([\d.]+) V"),
                             ("powersave", r", ([\d.]+) V"))]
        + [Figure("default cooling", r"default\s+cooling\s+(never)\s+throttles", _no_throttle)],
        multirun=True),
    Example(
        "first sweep",
        "python -m pipeline -m compile.tiling.mode=fixed compile.tiling.tile_m=16,64,256 "
        "compile.tiling.tile_n=32,128 compile.tiling.tile_k=64 quant=int8,fp16",
        [Figure("points that fit", r"The\s+first\s+line's\s+(\d+)\s+points\s+all\s+fit",
                lambda r: (str(sum(1 for p in _grid(r) if p["status"] == "ok")),)),
         Figure("int8 latency, slowest and fastest tiles",
                r"latency\s+falls\s+from\s+([\d.]+)\s+ms\s+\((\d+)\s+x\s+(\d+)\s+tiles,\s+int8\)"
                r"\s+to\s+([\d.]+)\s+ms\s+\((\d+)\s+x\s+(\d+)\)", _tiles),
         Figure("accuracy proxy", r"fp16's\s+([\d.]+)\s+against\s+int8's\s+([\d.]+)", _proxy),
         Figure("fp16 cost and front", r"fp16's\s+([\d.]+)x\s+latency,\s+so\s+(\w+)\s+fp16",
                _fp16_cost)],
        multirun=True),
]


def _flat(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def _run(example: Example, work: Path) -> Run:
    """Run the example as the README gives it, in ``work`` (kept: a second call reuses it)."""
    folder = work / re.sub(r"\W+", "_", example.name)
    done = folder / ("summary.csv" if example.multirun else "metrics.json")
    if not done.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        args = shlex.split(example.command)[3:]
        where = f"hydra.sweep.dir={folder}" if example.multirun else f"hydra.run.dir={folder}"
        proc = subprocess.run([sys.executable, "-m", "pipeline", *args, where], cwd=REPO,
                              capture_output=True, text=True)
        if proc.returncode != 0 or not done.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SystemExit(f"readme_figures: '{example.name}' failed: {tail[0]}")
    return Run(folder)


@dataclass
class Drift:
    example: str
    figure: str
    readme: tuple[str, ...]
    now: tuple[str, ...]


def check(text: str, work: Path) -> tuple[list[Drift], list[str], str]:
    """The drifted figures, the problems that are not drift (a command or figure the README
    no longer has) and the README with every figure regenerated."""
    flat = _flat(text)
    problems = [f"{e.name}: the README no longer shows `{e.command}`"
                for e in EXAMPLES if e.command not in flat]
    drifts: list[Drift] = []
    if problems:  # nothing is run for a README the examples no longer match
        return drifts, problems, text
    for example in EXAMPLES:
        run = _run(example, work)
        for fig in example.figures:
            found = list(re.finditer(fig.pattern, text))
            if len(found) != 1:
                problems.append(f"{example.name}: {fig.name}: pattern found {len(found)} "
                                f"times in the README (expected once): {fig.pattern}")
                continue
            match, now = found[0], fig.value(run)
            if len(now) != len(match.groups()):
                problems.append(f"{example.name}: {fig.name}: {len(match.groups())} figures in "
                                f"the README, {len(now)} from the run")
                continue
            if match.groups() != now:
                drifts.append(Drift(example.name, fig.name, match.groups(), now))
                for i in range(len(now), 0, -1):  # right to left: offsets stay valid
                    text = text[:match.start(i)] + now[i - 1] + text[match.end(i):]
    return drifts, problems, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="rewrite the drifted figures and copy the examples' plots")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the examples' runs here (reused when present)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="readme_figures_"))
    drifts, problems, fresh = check(args.readme.read_text(), work)
    for p in problems:
        print(f"readme_figures: {p}")
    for d in drifts:
        print(f"{args.readme.name}: {d.example}: {d.figure}: README says "
              f"{', '.join(d.readme)}, the example gives {', '.join(d.now)}")
    if args.write and not problems:
        args.readme.write_text(fresh)
        for example in EXAMPLES:
            if example.plot:
                shutil.copyfile(work / re.sub(r"\W+", "_", example.name) / example.plot[0],
                                REPO / example.plot[1])
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    if problems or (drifts and not args.write):
        return 1
    print(f"readme_figures: {sum(len(e.figures) for e in EXAMPLES)} figures of "
          f"{len(EXAMPLES)} examples {'written' if args.write else 'current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
