"""Loading, checking, saving and running ONNX models, with user-facing error messages.

onnxruntime is the reference executor: a model npuflow accepts must build an
InferenceSession, and its float outputs on a seeded input are recorded as a digest.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf.message import DecodeError
from onnx.external_data_helper import (
    ExternalDataInfo,
    _get_all_tensors,
    load_external_data_for_model,
    uses_external_data,
)

from pipeline.artifacts import atomic_path, bytes_digest
from pipeline.errors import UserError
from pipeline.running.interrupt import worker_pool

_ORT_NP_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}

# onnxruntime's own C++ log writes to stderr, past Python's logging: errors only there
ort.set_default_logger_severity(3)


def resolve_path(path: str | Path) -> Path:
    """A model file path; ``pkg:NAME/REL`` names a file inside an installed Python package
    (an ONNX model shipped in a wheel, e.g. ``pkg:rapidocr_onnxruntime/models/x.onnx``),
    found without importing the package."""
    text = str(path)
    if not text.startswith("pkg:"):
        return Path(path)
    package, _, rel = text[4:].partition("/")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"model.path: '{text}': no installed package '{package}' "
                        f"(pip install it, or give a file path)")
    return Path(next(iter(spec.submodule_search_locations))) / rel


def load_model(path: str | Path) -> onnx.ModelProto:
    """Load a user's ONNX file; each way a file can be wrong is its own line."""
    path = resolve_path(path)
    if path.is_dir():
        raise UserError(f"model.path: '{path}' is a directory; give the .onnx file in it")
    if not path.is_file():
        raise UserError(f"model.path: no such file '{path}'")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError) as exc:
        kind = type(exc).__name__
        raise UserError(f"model.path: '{path}' is not an ONNX model ({kind})") from exc
    _check_external_data(model, path)
    if not model.graph.node:
        raise UserError(f"model.path: '{path}' has a graph with no nodes (nothing to compile)")
    _check_acyclic(model.graph, path)
    return model


@functools.lru_cache(maxsize=64)
def _external_locations(path: str, size: int, mtime_ns: int) -> tuple[str, ...]:
    model = onnx.load(path, load_external_data=False)
    return tuple(sorted({ExternalDataInfo(t).location for t in _get_all_tensors(model)
                         if uses_external_data(t)}))


def external_data_files(path: str | Path) -> list[Path]:
    """The files an ONNX model keeps tensors in (``save_as_external_data``): its weights
    live there, so they are part of what a cached export depends on. [] for a file that
    is not a readable model (export reports that)."""
    path = resolve_path(path)
    try:
        st = path.stat()
        names = _external_locations(str(path), st.st_size, st.st_mtime_ns)
    except (OSError, DecodeError, ValueError, RuntimeError):
        return []
    return [path.parent / name for name in names]


def _check_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Tensors stored beside the model (``save_as_external_data``) must be there; load
    them, naming the first file that is missing rather than onnx's 60-line error."""
    for tensor in model.graph.initializer:
        if uses_external_data(tensor):
            location = path.parent / ExternalDataInfo(tensor).location
            if not location.is_file():
                raise UserError(f"model.path: '{path}' keeps tensor '{tensor.name}' in "
                                f"'{location}', which does not exist")
    try:
        load_external_data_for_model(model, str(path.parent))
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"model.path: '{path}': cannot load its external data: {first}"
                        ) from exc


def _check_acyclic(graph: onnx.GraphProto, path: Path) -> None:
    """A data-flow cycle, named by a node on it: onnx's checker only says the nodes are not
    sorted, and cuts its message before the node."""
    producer = {out: i for i, n in enumerate(graph.node) for out in n.output if out}
    waiting = {i: {producer[t] for t in n.input if t in producer}
               for i, n in enumerate(graph.node)}
    readers: dict[int, list[int]] = {}
    for i, deps in waiting.items():
        for d in deps:
            readers.setdefault(d, []).append(i)
    # Kahn's algorithm: linear in the graph (a 6,400-node chain took 2 s as a fixpoint scan)
    missing = {i: len(deps) for i, deps in waiting.items()}
    ready = [i for i, m in missing.items() if m == 0]
    while ready:
        i = ready.pop()
        del waiting[i]
        for r in readers.get(i, ()):
            missing[r] -= 1
            if missing[r] == 0:
                ready.append(r)
    # drop nodes downstream of a cycle: what is left feeds itself
    fed = {i: sum(1 for r in readers.get(i, ()) if r in waiting) for i in waiting}
    sinks = [i for i, n in fed.items() if n == 0]
    while sinks:
        i = sinks.pop()
        for d in waiting.pop(i):
            if d in waiting:
                fed[d] -= 1
                if fed[d] == 0:
                    sinks.append(d)
    if waiting:
        names = [f"'{graph.node[i].name or graph.node[i].output[0]}'" for i in sorted(waiting)]
        raise UserError(f"model.path: '{path}' has a cycle through nodes "
                        f"{', '.join(names[:4])}{' ...' if len(names) > 4 else ''}")


def save_model(model: onnx.ModelProto, path: Path) -> None:
    with atomic_path(path) as tmp:
        onnx.save(model, str(tmp))


def copy_file(source: Path, path: Path) -> None:
    """A model file copied whole or not at all (a model no stage changed: no serialising)."""
    with atomic_path(path) as tmp:
        shutil.copyfile(source, tmp)


def check_model(model: onnx.ModelProto, where: str) -> None:
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError,
            ValueError) as exc:  # ValueError: a malformed proto (e.g. tensor data type 0)
        first = str(exc).strip().splitlines()[0]
        raise UserError(f"{where}: the ONNX checker rejects the model: {first}") from exc


def session_options(threads: int = 1, optimized: bool = True) -> ort.SessionOptions:
    """Single-threaded by default: onnxruntime's multi-threaded kernels can differ in the
    last bits between runs, and npuflow's metrics must be bit-for-bit reproducible.

    Weight prepacking is off: npuflow's sessions run a few to a few dozen feeds, and
    repacking every MatMul and Conv weight at load costs more than it saves (a 4B language
    model's 0.4 GB block: 1.8 s -> 0.65 s a session, 0.29 -> 0.33 s a run).

    A QDQ model runs as written (``session.disable_quant_qdq``): DequantizeLinear, the float
    op, QuantizeLinear; the products of 8-bit values are exact in fp32 and summed in fp32,
    as an NPU's 32-bit accumulators sum them. onnxruntime's fused int8 kernels are not used:
    without VNNI their AVX2 form adds pairs of u8 x s8 products in saturating 16-bit
    registers (microsoft/onnxruntime#14642, #16105), so a quantized model's figures
    depended on the CPU: the default run's int8 output cosine read 0.9968 on an AVX2 EPYC
    and 0.9996 on an AVX-512 VNNI Xeon (0.9996 as written), and MLPerf Tiny's VWW file ran
    2 quantization steps from LiteRT's there (0 as written)."""
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def session(model: onnx.ModelProto | bytes | Path, threads: int = 1, where: str = "model",
            optimized: bool = True, disabled: tuple[str, ...] = ()) -> ort.InferenceSession:
    """An onnxruntime CPU session; an op it cannot run becomes one line naming the node.
    ``optimized=False`` runs the graph as written (no onnxruntime fusions), the honest
    reference when checking what a graph pass changed; ``disabled`` names onnxruntime graph
    transformers to leave out."""
    options = session_options(threads, optimized)
    data = model if isinstance(model, bytes) else str(model) if isinstance(model, Path) \
        else model.SerializeToString()
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"],
                                    **({"disabled_optimizers": list(disabled)} if disabled
                                       else {}))
    except Exception as exc:  # onnxruntime raises its own pybind exception types
        proto = model if isinstance(model, onnx.ModelProto) else None
        reason = _ort_reason(str(exc), proto)
        raise UserError(f"{where}: onnxruntime cannot run it: {reason}") from exc


def _ort_reason(message: str, model: onnx.ModelProto | None = None) -> str:
    m = re.search(r"implementation for (\w+)\((\d+)\) node with name '([^']*)'", message)
    if m:
        return f"no kernel for op {m.group(1)} (opset {m.group(2)}) at node '{m.group(3)}'"
    m = re.search(r'\("([^"]*)", (\w+), "([^"]*)", -?\d+\) : .*?is not a registered', message)
    if m:
        return f"unknown op {m.group(2)} (domain '{m.group(3)}') at node '{m.group(1)}'"
    m = re.search(r"([\w.]*):(\w+)\(-?\d+\) is not a registered function/op", message)
    if m:
        domain, op = m.groups()
        nodes = [n.name or n.output[0] for n in (model.graph.node if model else ())
                 if n.op_type == op and n.domain == domain]
        at = f" at node '{nodes[0]}'" if nodes else ""
        return f"unknown op {op} (domain '{domain}'){at}"
    return " ".join(message.split())[:300]


def seeded_feeds(sess: ort.InferenceSession, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs for every model input: uniform [0, 1) floats (valid for sqrt, log and
    pow as well as for image-like inputs), zeros for integer and boolean inputs."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in sess.get_inputs():
        if inp.type not in _ORT_NP_TYPES:
            raise UserError(f"model: input '{inp.name}' is {inp.type}; npuflow feeds numeric "
                            "tensors only")
        dtype = _ORT_NP_TYPES[inp.type]
        shape = [int(d) for d in inp.shape]
        if np.issubdtype(dtype, np.floating):
            feeds[inp.name] = rng.random(shape).astype(dtype)
        else:
            feeds[inp.name] = np.zeros(shape, dtype)
    return feeds


def run(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], where: str = "model"
        ) -> list[np.ndarray]:
    """``sess.run`` with onnxruntime's failure turned into one line naming the node."""
    try:
        return sess.run(None, feeds)
    except Exception as exc:  # onnxruntime's pybind exception types
        raise UserError(f"{where}: onnxruntime failed on a seeded input"
                        f"{failure_reason(exc)}") from exc


def failure_reason(exc: Exception) -> str:
    """" at <Op> node '<name>': <status message>" from an onnxruntime run error."""
    text = " ".join(str(exc).split())
    m = re.search(r"running (\w+) node\. Name:'([^']*)'", text)
    at = f" at {m.group(1)} node '{m.group(2)}'" if m else ""
    message = text.split("Status Message:")[-1].strip()
    message = message.split(" was false. ")[-1]  # an assertion's source line, then its words
    return f"{at}: {message[:200]}"


def parallel_workers() -> int:
    """Inferences that run at once: one per core this process may use. Each inference is
    single-threaded (``session_options``), so its result does not depend on how many run
    beside it: the outputs are bit-identical to a sequential loop's."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


def run_all(sess: ort.InferenceSession, feeds: list[dict[str, np.ndarray]],
            where: str = "model", step: Callable[[], None] | None = None
            ) -> list[list[np.ndarray]]:
    """``run`` on every feed, in order, ``parallel_workers()`` at a time (onnxruntime
    releases the GIL and a session may run concurrently): the evaluation and calibration
    loops were most of the quantize stage, one core idle. ``step`` is called as each
    result arrives (a progress bar)."""
    step = step or (lambda: None)
    workers = min(parallel_workers(), len(feeds))
    if workers <= 1:
        return [_stepped(run(sess, f, where), step) for f in feeds]
    with worker_pool(workers) as pool:
        return [_stepped(r, step) for r in pool.map(lambda f: run(sess, f, where), feeds)]


def _stepped(result: list[np.ndarray], step: Callable[[], None]) -> list[np.ndarray]:
    step()
    return result


def reference_run(model: onnx.ModelProto, seed: int, threads: int = 1, where: str = "model"
                  ) -> tuple[dict[str, np.ndarray], str]:
    """Run once on seeded inputs; return the outputs and a digest of their bytes."""
    sess = session(model, threads, where)
    outputs = run(sess, seeded_feeds(sess, seed), where)
    names = [o.name for o in sess.get_outputs()]
    blob = b"".join(np.ascontiguousarray(o).tobytes() for o in outputs)
    for name, out in zip(names, outputs, strict=True):
        if np.issubdtype(out.dtype, np.floating) and not np.all(np.isfinite(out)):
            raise UserError(f"model: output '{name}' is not finite on a seeded input")
    return dict(zip(names, outputs, strict=True)), bytes_digest(blob)
