"""Models nobody here wrote: every ONNX file in onnx's own test data either runs through
the pipeline or stops with a one-line user error; none crashes with a traceback."""

from __future__ import annotations

from pathlib import Path

import onnx

from pipeline.errors import UserError
from pipeline.running.runner import run_pipeline
from tests.conftest import compose_config

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
# the three largest light models (vgg19, zfnet512, alexnet) expand to 0.2-0.5 GB of weights
# once their ConstantOfShape fills are materialised; benchmarks/optimize_models.py runs vgg19
TOO_BIG = ("vgg19", "zfnet512", "alexnet")


def _models() -> list[Path]:
    found = sorted(DATA.rglob("model.onnx")) + sorted((DATA / "light").glob("*.onnx"))
    return [p for p in found if not any(big in p.name or big in p.parent.name
                                        for big in TOO_BIG)]


def test_every_onnx_test_data_model_completes_or_says_why(tmp_path):
    completed, refused, crashed = [], [], []
    for path in _models():
        cfg = compose_config("model=onnx", f"model.path={path}", "quant=none",
                             "data.calibration_size=2", "data.eval_size=2", "run.cache=false",
                             "simulate.frames=1", "quant.analysis.layers=false")
        label = str(path.relative_to(DATA))
        try:
            run_pipeline(cfg, tmp_path / label.replace("/", "_"))
            completed.append(label)
        except UserError as exc:
            assert "\n" not in str(exc)
            refused.append((label, str(exc)))
        except Exception as exc:  # a crash is a bug, whatever the model
            crashed.append((label, f"{type(exc).__name__}: {exc}"))
    assert not crashed, crashed[:5]
    assert len(completed) >= 120, refused
    assert len(completed) + len(refused) >= 140
