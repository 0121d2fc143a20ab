"""``npuflow-calibrate hardware=NAME measurements=FILE [--config-dir DIR] [overrides...]``

Fits the profile's ``calibrate:`` parameters to the measured latencies and writes
``<DIR or conf>/hardware/<NAME>_calibrated.yaml`` (the profile with the fitted values, and
in ``based_on`` how they were fitted) and ``calibration/<NAME>/`` (report.md, ratios.png,
fit.json). Extra ``key=value`` overrides apply to every row (e.g. ``quant=int8``). Nothing
is written unless every row composes, compiles and the fit completes.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from omegaconf import OmegaConf

from hardware.profile import ProfileError, check_priors
from hardware.profile_file import read_profile_yaml
from pipeline.artifacts import atomic_path, check_writable, write_text
from pipeline.calibrate.evaluate import Params, RowModel, compose_row, dump, params_of
from pipeline.calibrate.fit import fit, leave_one_out
from pipeline.calibrate.layer_fit import LayerFit
from pipeline.calibrate.layers import LayerTime, read_layers
from pipeline.calibrate.measurements import Measurement, read_measurements
from pipeline.calibrate.report import Outcome, markdown, plot, summary
from pipeline.cli import CONF_DIR, describe
from pipeline.configuration.config import check_complete
from pipeline.errors import UserError
from pipeline.reports.terminal import task
from pipeline.running import interrupt

USAGE = ("usage: npuflow-calibrate hardware=NAME measurements=FILE [layers=FILE] "
         "[--config-dir DIR] [--report-dir DIR] [key=value ...]")


def _parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    overrides: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg in ("--config-dir", "--report-dir"):
            opts[arg] = next(args, "")
        elif arg.startswith(("hardware=", "measurements=", "layers=")):
            key, _, value = arg.partition("=")
            opts[key] = value
        elif "=" in arg:
            overrides.append(arg)
        else:
            raise UserError(f"unexpected argument '{arg}'; {USAGE}")
    for key in ("hardware", "measurements"):
        if not opts.get(key):
            raise UserError(f"{key}= is required; {USAGE}")
    return opts, overrides


def _row_model(m: Measurement, conf_dirs: list[Path], common: list[str], name: str,
               path: Path, work: Path) -> RowModel:
    try:
        cfg = compose_row(conf_dirs, [f"hardware={name}", *m.model_overrides(), *common,
                                      *m.overrides])
        check_complete(cfg, {"hardware": name})
    except Exception as exc:
        message = describe(exc)
        if message is None:
            raise
        raise UserError(f"{path} row {m.row}: {message}") from exc
    return RowModel(m, cfg, work / f"row{m.row}")


def _profile_file(conf_dirs: list[Path], name: str) -> Path:
    for folder in reversed(conf_dirs):  # the user's --config-dir first
        if (folder / "hardware" / f"{name}.yaml").is_file():
            return folder / "hardware" / f"{name}.yaml"
    raise UserError(f"hardware={name}: no hardware/{name}.yaml in "
                    f"{', '.join(str(d) for d in conf_dirs)}")


def calibrated_yaml(source: Path, name: str, fitted: Params, text_summary: str,
                    rows: int, search: list[Path],
                    loo_ratios: list[float] | None = None) -> str:
    """The calibrated profile: the fitted values, how they were fitted, and its confidence
    band from the leave-one-out ratios (each row predicted by a fit that did not see it);
    none without them."""
    profile = read_profile_yaml(source, search)  # a derived profile's copy stands alone
    if loo_ratios:
        profile.confidence = {
            "ratio_low": float(f"{min(loo_ratios):.4g}"),
            "ratio_high": float(f"{max(loo_ratios):.4g}"),
            "pairs": len(loo_ratios), "kind": "leave_one_out",
            "based_on": f"npuflow-calibrate: {len(loo_ratios)} measured rows, each predicted "
                        "by a fit that did not see it"}
    else:
        profile.confidence = {"pairs": 0, "based_on": "calibrated; too few rows for a "
                                                      "leave-one-out band"}
    for key, value in fitted:
        prior = OmegaConf.select(profile, key)
        OmegaConf.update(profile, key, round(value) if isinstance(prior, int) else
                         float(f"{value:.6g}"))
    profile.name = name
    profile.description = f"{profile.description} (calibrated)"
    fitted_text = ", ".join(f"{k} = {v:.6g}" for k, v in fitted)
    profile.based_on = (f"{profile.based_on} CALIBRATED by npuflow-calibrate from {source.name} "
                        f"on {rows} measured rows: {fitted_text} (priors and bounds in the "
                        f"calibrate list); {text_summary}.")
    return OmegaConf.to_yaml(profile)


def run(argv: list[str]) -> Path:
    opts, common = _parse(argv)
    name = opts["hardware"]
    conf_dirs = [Path(CONF_DIR)]
    if opts.get("--config-dir"):
        conf_dirs.append(Path(opts["--config-dir"]).resolve())
    source = _profile_file(conf_dirs, name)
    zoo = sorted({p.stem for d in conf_dirs for p in (d / "model").glob("*.yaml")} - {"onnx"})
    path = Path(opts["measurements"])
    rows = read_measurements(path, zoo)
    layer_times = read_layers(Path(opts["layers"]), rows) if opts.get("layers") else {}
    out_name = name if name.endswith("_calibrated") else f"{name}_calibrated"
    out_dir = Path(opts.get("--config-dir") or CONF_DIR) / "hardware"
    report_dir = Path(opts.get("--report-dir") or Path("calibration") / out_name)
    check_writable(out_dir, "--config-dir" if opts.get("--config-dir") else "conf/hardware")
    check_writable(report_dir, "--report-dir")

    work = Path(tempfile.mkdtemp(prefix="npuflow-calibrate-"))  # per-row upstream folders
    try:
        return _calibrate(rows, layer_times, conf_dirs, common, name, path, work, source,
                          out_name, out_dir, report_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _calibrate(rows: list[Measurement], layer_times: dict[int, list[LayerTime]],
               conf_dirs: list[Path], common: list[str], name: str, path: Path, work: Path,
               source: Path, out_name: str, out_dir: Path, report_dir: Path) -> Path:
    models = [_row_model(m, conf_dirs, common, name, path, work) for m in rows]
    profile = check_complete(models[0].cfg, {"hardware": name})
    try:
        check_priors(profile)
    except ProfileError as exc:
        raise UserError(f"hardware/{name}.yaml: {exc}") from exc
    free = list(profile.calibrate)
    if not free:
        raise UserError(f"{source}: hardware.calibrate lists no parameter to fit")
    prior = params_of(models[0].cfg)
    measured = [m.latency_ms for m in rows]

    advance: list[Callable[..., None]] = [lambda: None]  # the current phase's progress

    def predict(i: int, params: Params) -> float:
        try:
            value = models[i].latency_ms(params)
        except UserError as exc:
            raise UserError(f"{path} row {rows[i].row}: {exc}") from exc
        advance[0]()
        return value

    with task("calibrate: preparing rows", len(models)) as step:
        for i, model in enumerate(models):
            try:
                model.prepare(Path(model.cfg.run.cache_dir) if model.cfg.run.cache else None)
            except UserError as exc:
                raise UserError(f"{path} row {rows[i].row}: {exc}") from exc
            step()
    with task("calibrate: fitting (model evaluations)", None) as step:
        advance[0] = step
        before = [predict(i, prior) for i in range(len(rows))]
        layers = LayerFit(models, layer_times, prior)
        groups = [(m.model, m.overrides) for m in rows]
        result = fit(predict, range(len(rows)), measured, free, prior, layers.residuals,
                     groups)
        result = replace(result, params=models[0].typed(result.params))
        after = [predict(i, result.params) for i in range(len(rows))]
    advance[0] = lambda: None
    with task("calibrate: leave-one-out refits", len(rows)) as step:
        loo = leave_one_out(predict, measured, free, prior, layers.residuals, groups, step)

    outcome = Outcome([m.label for m in rows], measured, before, after, loo, prior,
                      result.params, free, result.rms_log_error, result.evaluations,
                      layers.summary(result.params))
    text = summary(outcome)
    yaml_text = calibrated_yaml(source, out_name, result.params, text, len(rows),
                               [d / "hardware" for d in reversed(conf_dirs)],
                               [p / m for p, m in zip(loo, measured, strict=True)]
                               if loo is not None else None)
    report_dir.mkdir(parents=True, exist_ok=True)
    write_text(report_dir / "report.md", markdown(outcome, f"{out_name}: calibration report"))
    with atomic_path(report_dir / "ratios.png") as tmp:
        plot(outcome, tmp)
    dump(report_dir / "fit.json", {"prior": dict(prior), "fitted": dict(result.params),
                                   "measured": measured, "before": before, "after": after,
                                   "leave_one_out": loo, "rows": outcome.labels,
                                   "layers": outcome.layers})
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text(out_dir / f"{out_name}.yaml", yaml_text)
    print(f"{out_dir / f'{out_name}.yaml'}: {text}")
    print(f"report: {report_dir / 'report.md'}")
    return out_dir / f"{out_name}.yaml"


def main(argv: list[str] | None = None) -> None:
    with interrupt.handled():
        try:
            run(list(sys.argv[1:] if argv is None else argv))
        except interrupt.Interrupted as exc:
            interrupt.exit_for(exc, "npuflow-calibrate")
        except UserError as exc:
            print(f"npuflow-calibrate: error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
