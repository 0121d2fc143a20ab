"""Automatic mixed precision: keep the fewest layers float that meet the target, and never
end worse than plain int8.

A greedy forward search, the shape of the mixed-precision searches in the literature
(HAWQ's sensitivity ordering, Dong et al. 2019; the "fallback" loop of Intel Neural
Compressor's accuracy-driven tuning): candidates are ranked by their isolated sensitivity
(the model's objective with that layer alone quantized; worst first). Starting from the
fully quantized model, each candidate is tried float in turn, on the whole evaluation set,
and kept only if the objective improves (``Evaluator.objective``: the user's metric, ties
broken by output cosine; output cosine without labels). The search stops when the target
is met or a budget (``max_float_layers`` kept, ``max_trials`` tried) is spent, and says
which. Every trial is one point of the curve (accepted or not), so the cost is visible:
one quantization from the range cache and one evaluation per trial.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from omegaconf import DictConfig

from pipeline.quantization.evaluation import Evaluator
from pipeline.quantization.layers import Layer
from pipeline.reports.terminal import task

log = logging.getLogger(__name__)

Build = Callable[[list[str]], list[np.ndarray]]  # excluded nodes -> evaluation outputs


@dataclass
class Search:
    exclude: list[str]  # nodes kept float at the end
    float_layers: list[str]  # layers the search kept float (names)
    curve: list[dict] = field(default_factory=list)
    stop: str = ""


def target_met(judge: Evaluator, scores: dict, target: DictConfig) -> bool:
    if target.get("min_output_cosine") is not None:
        return scores["output_cosine"] >= target.min_output_cosine
    return judge.drop_points(scores) <= target.max_drop


def rank(layers: list[Layer], isolated: dict[str, dict], judge: Evaluator) -> list[Layer]:
    """Most sensitive first: lowest objective with the layer alone quantized."""
    return sorted((layer for layer in layers if layer.name in isolated),
                  key=lambda layer: (judge.objective(isolated[layer.name]["scores"]),
                                     layer.name))


def _point(trial: int, layer: str | None, kept: bool, floats: list[str], nodes: list[str],
           scores: dict, judge: Evaluator, action: str = "float") -> dict:
    """A trial: the candidate, whether it was kept, the float layers after it and the nodes
    its model kept float (``float_nodes``: what compile re-quantizes to cost the point);
    ``action``: ``float`` (try it float) or ``requantize`` (the pruning pass)."""
    return {"trial": trial, "action": action, "candidate": layer, "kept": kept,
            "float_layers": len(floats),
            "layers": list(floats), "float_nodes": list(nodes),
            "drop_points": judge.drop_points(scores), **scores}


def search(ranked: list[Layer], base_exclude: list[str], build: Build, judge: Evaluator,
           cfg: DictConfig) -> Search:
    scores = judge.scores(build(base_exclude))
    best = judge.objective(scores)
    result = Search(list(base_exclude), [], [_point(0, None, True, [], base_exclude, scores,
                                                     judge)])
    if target_met(judge, scores, cfg.target):
        result.stop = "target met by plain int8"
        return result
    budget = min(cfg.max_trials, len(ranked))
    with task("quantize: mixed-precision search", budget) as step:
        for trial, layer in enumerate(ranked[:budget], start=1):
            if len(result.float_layers) >= cfg.max_float_layers:
                result.stop = f"budget: {cfg.max_float_layers} float layers (max_float_layers)"
                break
            exclude = sorted(set(result.exclude) | set(layer.nodes))
            scores = judge.scores(build(exclude))
            kept = judge.objective(scores) > best
            if kept:
                best, result.exclude = judge.objective(scores), exclude
                result.float_layers.append(layer.name)
            result.curve.append(_point(trial, layer.name, kept, result.float_layers, exclude,
                                       scores, judge))
            step(f"quantize: mixed-precision search ({len(result.float_layers)} float)")
            if kept and target_met(judge, scores, cfg.target):
                result.stop = f"target met with {len(result.float_layers)} float layers"
                break
        else:
            result.stop = (f"budget: {cfg.max_trials} trials (max_trials)"
                           if budget < len(ranked) else "no candidate left")
    if result.stop.startswith("target met with"):
        _prune(result, {layer.name: layer for layer in ranked}, build, judge, cfg)
    return result


def _prune(result: Search, by_name: dict[str, Layer], build: Build, judge: Evaluator,
           cfg: DictConfig) -> None:
    """The fewest float layers: a layer kept early may be unnecessary once later ones are
    float. Each (but the last, which met the target) is re-quantized in turn and stays
    quantized if the target still holds; the result still meets the target, so it is still
    above plain int8."""
    trial = len(result.curve)
    with task("quantize: mixed precision, pruning", len(result.float_layers) - 1) as step:
        for name in list(result.float_layers[:-1]):
            exclude = sorted(set(result.exclude) - set(by_name[name].nodes))
            scores = judge.scores(build(exclude))
            kept = target_met(judge, scores, cfg.target)
            if kept:
                result.exclude = exclude
                result.float_layers.remove(name)
            result.curve.append(_point(trial, name, kept, result.float_layers, exclude,
                                       scores, judge, "requantize"))
            trial += 1
            step()
    result.stop = f"target met with {len(result.float_layers)} float layers"


def summary(result: Search, judge: Evaluator) -> str:
    kept = [p for p in result.curve if p["kept"]]
    first, last = kept[0], kept[-1]
    key = judge.objective_key if judge.labelled else "output_cosine"
    return (f"quant.auto: {result.stop}; {key} {first[key]:.4f} -> {last[key]:.4f} with "
            f"{len(result.float_layers)} float layers after {len(result.curve) - 1} trials")
