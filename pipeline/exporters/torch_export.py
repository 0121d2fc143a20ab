"""``model=torch``: a user's nn.Module exported with torch.onnx at a pinned opset.

The dynamo exporter (torch.export, then onnxscript) is tried first, the TorchScript tracer
second (``model.exporter=auto``); which one produced the model is recorded in model.json.
The export is checked against the module's own output on the seeded input. Tracing follows
one branch of a data-dependent ``if``: a TracerWarning saying so is an error naming the
file and line, not a model that is right for one input. When export fails, the module's
submodules are exported one by one on the inputs they saw, and the deepest one that fails
is named (the first thing a user asks is which layer).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import re
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx
from omegaconf import DictConfig, OmegaConf

from pipeline.errors import UserError
from pipeline.exporters.verify import max_error, seeded_input
from pipeline.running import user_code


def _factory(spec: str | None):
    if not spec or ":" not in spec:
        raise UserError("model.module: model=torch needs model.module=package.module:factory "
                        f"(got {spec!r})")
    module_name, attr = spec.split(":", 1)
    module = user_code.import_module(module_name, "model.module")
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UserError(f"model.module: '{module_name}' has no callable '{attr}'")
    return factory


def build_module(cfg: DictConfig):
    import torch

    kwargs = OmegaConf.to_container(cfg.kwargs, resolve=True) if cfg.kwargs else {}
    factory = _factory(cfg.module)
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as exc:
        raise UserError(f"model.kwargs: {cfg.module}: {exc}") from exc
    except ValueError:
        pass  # a builtin without a signature: the call says
    net = user_code.call("model.module", cfg.module, factory, **kwargs)
    if not isinstance(net, torch.nn.Module):
        raise UserError(f"model.module: {cfg.module} returned {type(net).__name__}, "
                        "not a torch.nn.Module")
    if cfg.weights:
        _load_weights(net, Path(cfg.weights), cfg.module)
    return net.eval()


def _load_weights(net: Any, path: Path, module: str) -> None:
    """A state_dict saved with ``torch.save``: a file that is not one, or holds something
    else, or does not fit the module, is one line each."""
    import torch

    if not path.is_file():
        raise UserError(f"model.weights: no such file '{path}'")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle, zip and torch's own errors for a foreign file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(f"model.weights: '{path}' is not a state_dict saved with torch.save "
                        f"({type(exc).__name__}: {first})") from exc
    if not isinstance(state, Mapping):
        raise UserError(f"model.weights: '{path}' holds a {type(state).__name__}, not a "
                        "state_dict (save net.state_dict(), not the module or a list)")
    try:
        net.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise UserError(f"model.weights: '{path}' does not fit {module}: {first}") from exc


def _export(net, x, opset: int, exporter: str) -> onnx.ModelProto:
    import torch

    with tempfile.TemporaryDirectory() as tmp, _quiet_loggers():
        path = Path(tmp) / "model.onnx"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.onnx.export(net, (x,), str(path), opset_version=opset,
                              dynamo=exporter == "dynamo", input_names=["input"])
        for w in caught:
            if issubclass(w.category, torch.jit.TracerWarning) and "boolean" in str(w.message):
                raise UserError(f"model.module: data-dependent control flow at "
                                f"{Path(w.filename).name}:{w.lineno}: the trace would keep "
                                "one branch for every input")
        return onnx.load(str(path))


@contextlib.contextmanager
def _quiet_loggers():
    """torch.onnx and onnxscript log their progress and fallbacks (with tracebacks) at
    WARNING; what matters reaches the user as the export record or one error line."""
    loggers = [logging.getLogger(n) for n in ("onnxscript", "torch")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _reason(exc: Exception) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # the dynamo exporter colours its text
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    cause = next((line for line in lines if "not supported" in line or "No decomp" in line
                  or "Unsupported" in line), lines[0] if lines else type(exc).__name__)
    return cause[:200]


def _failing_layer(net, x, opset: int) -> str | None:
    """The deepest submodule that does not export on the input it saw in a forward."""
    import torch

    seen: dict[str, tuple] = {}

    def keep_input(name: str):
        def hook(module, args, output) -> None:  # returns None: the output stays the module's
            seen.setdefault(name, args)
        return hook

    hooks = [m.register_forward_hook(keep_input(name)) for name, m in net.named_modules()
             if name]
    try:
        with torch.no_grad():
            net(x)
    except Exception:  # the forward itself fails: nothing to localise
        return None
    finally:
        for h in hooks:
            h.remove()
    modules = dict(net.named_modules())
    failing = None
    for name in sorted(seen, key=lambda n: n.count(".")):
        if failing is not None and not name.startswith(failing + "."):
            continue
        try:
            with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                torch.onnx.export(modules[name], seen[name], io.BytesIO(),
                                  opset_version=opset, dynamo=False)
        except Exception:
            failing = name
    return failing


def export(cfg: DictConfig) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """The module as ONNX, and what model.json records of the export."""
    try:
        import torch
    except ImportError as exc:
        raise UserError("model=torch needs PyTorch: pip install 'npuflow[torch]'") from exc
    if cfg.input_shape is None:
        raise UserError("model.input_shape: model=torch needs the input shape, e.g. "
                        "model.input_shape=[1,3,224,224]")
    net = build_module(cfg)
    x_np = seeded_input(list(cfg.input_shape), cfg.seed)
    x = torch.from_numpy(x_np)
    try:
        with torch.no_grad():
            out = net(x)
    except Exception as exc:  # the user's forward on the shape they gave
        raise UserError(f"model.input_shape: {cfg.module} fails on an input of shape "
                        f"{list(cfg.input_shape)}: {_reason(exc)}") from exc
    expected = [t.numpy() for t in (out if isinstance(out, tuple | list) else (out,))]
    order = ["dynamo", "torchscript"] if cfg.exporter == "auto" else [cfg.exporter]
    failures: dict[str, str] = {}
    for exporter in order:
        try:
            model = _export(net, x, cfg.opset, exporter)
        except UserError:
            raise
        except Exception as exc:  # torch.onnx's and torch.export's many error types
            failures[exporter] = _reason(exc)
            continue
        error = max_error(model, x_np, expected, f"model.module {cfg.module} ({exporter})")
        return model, {"exporter": exporter, "exporter_failures": failures,
                       "opset": next(o.version for o in model.opset_import
                                     if o.domain in ("", "ai.onnx")),
                       "framework": f"torch {torch.__version__}",
                       "max_abs_error_vs_framework": error}
    with _quiet_loggers():
        layer = _failing_layer(net, x, cfg.opset)
    where = f" at layer '{layer}' ({type(dict(net.named_modules())[layer]).__name__})" \
        if layer else ""
    reason = "; ".join(f"{k}: {v}" for k, v in failures.items())
    raise UserError(f"model.module: torch.onnx cannot export {cfg.module}{where}: {reason}")
