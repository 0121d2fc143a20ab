"""Evaluation metrics as components (the ``eval`` config group).

A metric is any callable ``(outputs, labels) -> dict[str, float]``: ``outputs`` is the list
of the model's first output per evaluation sample, ``labels`` the data's labels (integer
class indices or text). ``eval.metric`` names it with ``_target_`` plus its arguments; a
metric that accepts ``metadata`` receives the model's ONNX metadata (how the CTC metric
finds PaddleOCR's character list). Built here, not with ``hydra.utils.instantiate``, so
that a ``_target_`` which does not import is one line naming the key, checked at the door.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pipeline.errors import UserError
from pipeline.running import user_code

Metric = Callable[[list[np.ndarray], np.ndarray], dict[str, float]]


def resolve(target: str | None) -> Callable[..., Any]:
    """The callable a dotted path names (``pkg.module.name`` or ``pkg.module:name``)."""
    if not target or not isinstance(target, str):
        raise UserError("eval.metric._target_: missing (a dotted path to a callable "
                        "(outputs, labels) -> dict)")
    module_name, _, attr = target.replace(":", ".").rpartition(".")
    if not module_name:
        raise UserError(f"eval.metric._target_: '{target}' is not a dotted path "
                        "(package.module.name)")
    module = user_code.import_module(module_name, "eval.metric._target_", target)
    found = getattr(module, attr, None)
    if found is None:
        raise UserError(f"eval.metric._target_: '{module_name}' has no '{attr}'")
    if not callable(found):
        raise UserError(f"eval.metric._target_: '{target}' is not callable")
    return found


def build(metric_cfg: Mapping[str, Any], metadata: Mapping[str, str]) -> Metric:
    """The configured metric, its arguments bound (and the model's metadata if it takes it)."""
    target = resolve(metric_cfg.get("_target_"))
    kwargs = {k: v for k, v in metric_cfg.items() if k != "_target_"}
    params = inspect.signature(target).parameters
    if "metadata" in params:
        kwargs["metadata"] = dict(metadata)
    unknown = [k for k in kwargs if k not in params and not any(
        p.kind is p.VAR_KEYWORD for p in params.values())]
    if unknown:
        raise UserError(f"eval.metric.{unknown[0]}: not an argument of "
                        f"{metric_cfg['_target_']}")
    if inspect.isclass(target):
        return user_code.call("eval.metric", metric_cfg["_target_"], target, **kwargs)
    return functools.partial(target, **kwargs)


def score(metric: Metric, outputs: list[np.ndarray], labels: np.ndarray) -> dict[str, float]:
    """Run a metric and hold it to its contract: a dict of finite floats."""
    name = getattr(metric, "__qualname__", None) or getattr(
        getattr(metric, "func", None), "__qualname__", type(metric).__name__)
    result = user_code.call("eval.metric", name, metric, outputs, labels)
    if not isinstance(result, Mapping) or not result:
        raise UserError("eval.metric: the metric returned "
                        f"{type(result).__name__}, not a non-empty dict of floats")
    out = {}
    for key, value in result.items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError) as exc:
            raise UserError(f"eval.metric: value of '{key}' is not a number ({value!r})") \
                from exc
    return out
