"""Where a model comes from: the built-in zoo, a user's ONNX file made static, a PyTorch
module or a scikit-learn estimator (pipeline/exporters/).

For a user's file: upgrade the opset (onnx.version_converter), pin every dynamic input dim
from ``model.input_shape``, and refuse a model whose inputs stay dynamic, since an NPU
compiler plans memory and instructions for static shapes (DOMAIN.md section 4).
"""

from __future__ import annotations

import onnx
from omegaconf import DictConfig, OmegaConf
from onnx import numpy_helper, version_converter

from pipeline import onnx_io, zoo
from pipeline.errors import UserError
from pipeline.running import memory_budget

ZOO_SIZE_KEYS = "model.params.image_size or model.batch"
# what export keeps beside model.onnx for a pre-quantized source (quant=as_is reads them)
TFLITE_FILE = "model.tflite"  # a TFLite source as shipped: LiteRT runs it
FLOAT_FILE = "float.onnx"  # model.float_path, static and checked


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def modern_ir(model: onnx.ModelProto) -> onnx.ModelProto:
    """Raise the IR version to what the opset needs (the version converter does not) and
    drop initializers from the graph inputs, which IR < 4 required and later tools reject
    as "initializer but not in graph input" once they rewrite the inputs."""
    needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), True)
    if model.ir_version < needed:
        model.ir_version = needed
        inits = {i.name for i in model.graph.initializer}
        keep = [i for i in model.graph.input if i.name not in inits]
        del model.graph.input[:]
        model.graph.input.extend(keep)
    return model


def upgrade_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    current = _opset(model)
    if current >= target:
        return modern_ir(model)
    try:
        return modern_ir(version_converter.convert_version(model, target))
    except Exception as exc:  # the converter raises bare RuntimeErrors / C++ exceptions
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"model.opset: cannot convert opset {current} -> {target}: {first}"
        ) from exc


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _dynamic_axes(vi: onnx.ValueInfoProto) -> list[tuple[int, str]]:
    dims = vi.type.tensor_type.shape.dim
    return [(i, d.dim_param or "?") for i, d in enumerate(dims)
            if not (d.HasField("dim_value") and d.dim_value > 0)]


def _declare_static_outputs(model: onnx.ModelProto) -> None:
    """Replace symbolic output declarations by the shapes onnxruntime computes for the
    now-static input. Exporters write them for the dynamic model and sometimes get the
    rank wrong (ddddocr's OCR model declares [1, seqlen] and returns [32, 1, 8210]);
    onnxruntime only warns, but the checker's strict inference refuses the model."""
    dynamic = [o for o in model.graph.output if _dynamic_axes(o)]
    if not dynamic:
        return
    sess = onnx_io.session(model, where="model (static output shapes)")
    outputs = onnx_io.run(sess, onnx_io.seeded_feeds(sess, 0), "model (static output shapes)")
    actual = {o.name: out.shape for o, out in zip(sess.get_outputs(), outputs, strict=True)}
    for out in dynamic:
        shape = out.type.tensor_type.shape
        del shape.dim[:]
        for size in actual[out.name]:
            shape.dim.add().dim_value = int(size)


def fix_input_shapes(model: onnx.ModelProto, input_shape: list[int] | None,
                     knob: str = "model.input_shape") -> onnx.ModelProto:
    """Pin the inputs to ``input_shape`` and refuse what stays dynamic, empty or too large
    to draw a seeded input for (``knob`` is the key a user changes to shrink it)."""
    inputs = graph_inputs(model)
    if input_shape is not None:
        if len(inputs) != 1:
            raise UserError(
                f"model.input_shape: the model has {len(inputs)} inputs "
                f"({', '.join(i.name for i in inputs)}); input_shape fixes single-input models"
            )
        vi = inputs[0]
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != len(input_shape):
            raise UserError(
                f"model.input_shape: input '{vi.name}' has rank {len(dims)}, "
                f"got {list(input_shape)}"
            )
        for d, value in zip(dims, input_shape, strict=True):
            if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != value:
                raise UserError(
                    f"model.input_shape: input '{vi.name}' is fixed at "
                    f"{[x.dim_value for x in dims]}, got {list(input_shape)}"
                )
            d.Clear()
            d.dim_value = int(value)
        # Intermediate value_info may still carry the symbolic dims: let inference redo them.
        del model.graph.value_info[:]
        memory_budget.check_inputs(model, knob)
        _declare_static_outputs(model)
    for vi in graph_inputs(model):
        dims = vi.type.tensor_type.shape.dim
        empty = [i for i, d in enumerate(dims) if d.HasField("dim_value") and d.dim_value == 0]
        if empty:
            raise UserError(f"model: input '{vi.name}' has size 0 on axis {empty[0]} (an "
                            "empty tensor); set model.input_shape=[...] to the real shape")
        dynamic = _dynamic_axes(vi)
        if dynamic:
            axes = ", ".join(f"axis {i} ('{name}')" for i, name in dynamic)
            raise UserError(
                f"model: input '{vi.name}' has dynamic {axes}; set model.input_shape=[...] "
                "to compile a static shape"
            )
    memory_budget.check_inputs(model, knob)
    return model


def with_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A zoo model at ``batch`` images per inference. The builders write batch 1 as the
    leading dim of the inputs, the outputs and every Reshape target; those become
    ``batch``, and 0 (ONNX: copy the input's dim) in the Reshape targets. The tests check
    every zoo model's batched outputs against its per-image ones."""
    if batch == 1:
        return model
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    for node in g.node:
        target = inits.get(node.input[1]) if node.op_type == "Reshape" else None
        if target is not None:
            shape = numpy_helper.to_array(target).copy()
            if shape.size and shape[0] == 1:
                shape[0] = 0
                target.CopyFrom(numpy_helper.from_array(shape, target.name))
    for vi in [*graph_inputs(model), *g.output]:
        dims = vi.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == 1:
            dims[0].dim_value = batch
    del g.value_info[:]
    return model


def build_model(cfg: DictConfig, cache_dir: str) -> tuple[onnx.ModelProto, dict]:
    """The model described by ``cfg`` (the ``model`` group), static and at ``cfg.opset``,
    and what its export recorded (exporter, framework, error against the framework)."""
    if cfg.batch != 1 and cfg.source != "zoo":
        raise UserError(f"model.batch: batch is a zoo option; model={cfg.source} takes "
                        "it from model.input_shape")
    if cfg.source == "zoo":
        if cfg.name not in zoo.ZOO:
            raise UserError(f"model.name: unknown zoo model '{cfg.name}' "
                            f"(known: {', '.join(sorted(zoo.ZOO))})")
        params = OmegaConf.to_container(cfg.params, resolve=True)
        assert isinstance(params, dict)
        if cfg.name in zoo.NEEDS_CACHE:
            params["cache_dir"] = cache_dir
        try:
            model = zoo.ZOO[cfg.name](seed=cfg.seed, opset=cfg.opset, **params)
        except TypeError as exc:
            raise UserError(f"model.params: {exc}") from exc
        return fix_input_shapes(with_batch(model, cfg.batch), cfg.input_shape,
                                ZOO_SIZE_KEYS), {}
    if cfg.source == "llm":
        from pipeline.llm import source as llm_source

        return llm_source.build(cfg)
    if cfg.source in ("torch", "sklearn"):
        from pipeline.exporters import sklearn_export, torch_export

        exporter = torch_export if cfg.source == "torch" else sklearn_export
        model, info = exporter.export(cfg)
        return upgrade_opset(fix_input_shapes(model, None), cfg.opset), info
    if cfg.source == "tflite":
        from pipeline.exporters import tflite_export

        model, info = tflite_export.export(cfg)
        return fix_input_shapes(model, cfg.input_shape), info
    if not cfg.path:  # source=onnx (the schema's enum allows nothing else)
        raise UserError("model.path: model=onnx needs model.path=FILE")
    model = onnx_io.load_model(cfg.path)
    model = fix_input_shapes(model, cfg.input_shape)
    return upgrade_opset(model, cfg.opset), {}


def build_float_model(cfg: DictConfig, quantized: onnx.ModelProto) -> onnx.ModelProto | None:
    """``model.float_path``: the float model a pre-quantized file came from (.tflite or
    .onnx), at the same inputs, for the per-layer analysis of ``quant=as_is``."""
    if not cfg.get("float_path"):
        return None
    path = onnx_io.resolve_path(cfg.float_path)
    if path.suffix.lower() == ".tflite":
        from pipeline.exporters import tflite_onnx, tflite_reader

        model = tflite_onnx.convert(tflite_reader.read(path))
    else:
        model = upgrade_opset(onnx_io.load_model(path), cfg.opset)
    model = fix_input_shapes(model, cfg.input_shape, "model.float_path")
    ours = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim])
            for i in graph_inputs(model)]
    theirs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim])
              for i in graph_inputs(quantized)]
    if [s for _, s in ours] != [s for _, s in theirs]:
        raise UserError(f"model.float_path: '{path}' takes inputs {ours}; the model takes "
                        f"{theirs}")
    return _rename_inputs(model, {a: b for (a, _), (b, _) in zip(ours, theirs, strict=True)})


def _rename_inputs(model: onnx.ModelProto, names: dict[str, str]) -> onnx.ModelProto:
    """The float model's inputs under the quantized model's names (the converters name
    them after their own tensors: 'input_1' and 'input_1_int8'), so one feed runs both."""
    names = {a: b for a, b in names.items() if a != b}
    for vi in model.graph.input:
        vi.name = names.get(vi.name, vi.name)
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = names.get(name, name)
    return model
