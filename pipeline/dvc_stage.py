"""Run one stage from ``params.yaml`` for DVC: ``python -m pipeline.dvc_stage compile``.

``dvc.yaml`` calls this once per stage. ``params.yaml`` is the full composed config (DVC's
Hydra composition regenerates it from ``conf/`` for ``dvc exp run -S key=value``); it is
validated against the same schema as the CLI. Stage folders live under ``dvc_run/``, each
with its ``metrics.json``, which dvc.yaml lists as metrics.

``python -m pipeline.dvc_stage --write-params`` rewrites params.yaml from the default
composition (a test checks the committed file is exactly that).
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline.artifacts import write_text
from pipeline.configuration.config import check_complete
from pipeline.configuration.schema import NpuflowConfig, register_configs
from pipeline.errors import UserError
from pipeline.running import interrupt
from pipeline.running.registry import build_chain
from pipeline.running.runner import run_stage

OUT = Path("dvc_run")
PARAMS = Path("params.yaml")
CONF = Path(__file__).resolve().parent.parent / "conf"


def default_params() -> str:
    register_configs()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("config")
    return OmegaConf.to_yaml(cfg, resolve=True)


def load_params(path: Path = PARAMS):
    if not path.is_file():
        raise UserError(f"{path}: not found (run from the project root)")
    try:
        return OmegaConf.merge(OmegaConf.structured(NpuflowConfig), OmegaConf.load(path))
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "?")
        raise UserError(f"{path}: config error at '{key}': "
                        f"{str(exc).splitlines()[0]}") from exc


def run(stage_name: str) -> None:
    cfg = load_params()
    check_complete(cfg, {}, composed=str(PARAMS))
    chain = build_chain(cfg.stages)
    names = [n for n, _ in chain]
    if stage_name not in names:
        raise UserError(f"stage '{stage_name}' is not in stages.order ({', '.join(names)})")
    upstream = names[: names.index(stage_name)]
    stage = dict(chain)[stage_name]
    OUT.mkdir(exist_ok=True)
    run_stage(stage_name, stage, {n: OUT / n for n in upstream}, cfg, OUT)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    with interrupt.handled():
        try:
            if args == ["--write-params"]:
                write_text(PARAMS, default_params())
                return
            if len(args) != 1:
                raise UserError("usage: python -m pipeline.dvc_stage STAGE | --write-params")
            run(args[0])
        except interrupt.Interrupted as exc:
            interrupt.exit_for(exc)
        except UserError as exc:
            print(f"npuflow: error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
