"""Optimization passes by name; ``optimize.passes`` lists names or ``{_target_: ...}``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
from hydra.errors import InstantiationException
from hydra.utils import get_method
from omegaconf import DictConfig

from pipeline.errors import UserError
from pipeline.optimizer import library_passes, npu_passes
from pipeline.optimizer.graph_edit import on_weightless
from pipeline.running import user_code

Pass = Callable[[onnx.ModelProto], onnx.ModelProto]

PASSES: dict[str, Pass] = {
    "onnxslim": library_passes.onnxslim_pass,
    "ort_basic": library_passes.ort_basic_pass,
    "onnxsim": library_passes.onnxsim_pass,
    # npuflow's own passes touch nodes, scalars, biases and shape constants only: run on
    # the model without its weights' payloads (graph_edit.on_weightless), pure
    "fold_shape_chains": on_weightless(npu_passes.fold_shape_chains),
    "remove_noops": on_weightless(npu_passes.remove_noops),
    "flatten_gemm_bias": on_weightless(npu_passes.flatten_gemm_bias),
    "fuse_gelu": on_weightless(npu_passes.fuse_gelu),
    "fuse_silu": on_weightless(npu_passes.fuse_silu),
}


def resolve(entry: Any, index: int) -> tuple[str, Pass]:
    """A pass from a list entry: a registered name, or a mapping with ``_target_`` (a
    function model -> model) and an optional ``name``; ``enabled: false`` skips it."""
    if isinstance(entry, str):
        if entry not in PASSES:
            raise UserError(f"optimize.passes[{index}]: unknown pass '{entry}' "
                            f"(known: {', '.join(PASSES)})")
        return entry, PASSES[entry]
    if isinstance(entry, dict | DictConfig) and "_target_" in entry:
        try:
            fn = get_method(entry["_target_"])
        except (InstantiationException, ImportError, ValueError) as exc:
            raise UserError(f"optimize.passes[{index}]._target_: cannot import "
                            f"'{entry['_target_']}': "
                            f"{user_code.explain(user_code.root_cause(exc))}") from exc
        return str(entry.get("name", entry["_target_"])), fn
    if isinstance(entry, dict | DictConfig) and "name" in entry:
        return resolve(entry["name"], index)
    raise UserError(f"optimize.passes[{index}]: expected a pass name or {{_target_: ...}}")


def enabled(entry: Any) -> bool:
    return not (isinstance(entry, dict | DictConfig) and entry.get("enabled") is False)
