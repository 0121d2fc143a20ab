"""Standard cleanups from maintained libraries (constant folding, dead code, identity and
dropout removal, BN and Pad folding into Conv, MatMul+Add -> Gemm, transpose cancellation).

Measured on the zoo and on onnx's test-data models (light_*: resnet50, squeezenet,
densenet121, inception_v2, shufflenet), node counts after each library alone:

    model              nodes  ort_basic  onnxsim  onnxslim
    resnet50 (zoo)       175        122      122       122
    yolov5s@320 (zoo)    265        208      208       208
    bert_encoder (zoo)    33         35      14*        33
    light_inception_v2  1054        168      226       154
    light_densenet121   1988        491      550       491

(* onnxsim rewrote BERT into com.microsoft contrib ops: not portable ONNX.) So the default
chain is onnxslim (largest reductions, portable) then onnxruntime's BASIC level (whose saved
model is standard ONNX) to catch what slim leaves; onnxsim is available but off by default
and refuses output in a non-standard domain.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile

import onnx
import onnxruntime as ort

from pipeline.errors import PassNotApplicable, UserError
from pipeline.optimizer.graph_edit import drop_unused_opsets
from pipeline.optimizer.slim_linear import linear_slim


def _foreign_domains(model: onnx.ModelProto) -> set[str]:
    return {n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")}


def _portable(before: onnx.ModelProto, model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """Refuse a pass's output that uses op domains its input did not (a model that came
    with contrib ops, e.g. onnxruntime's DynamicQuantizeLSTM, may keep them)."""
    foreign = sorted(_foreign_domains(model) - _foreign_domains(before))
    if foreign:
        raise PassNotApplicable(f"pass '{name}' produced non-standard ops in domain(s) "
                                f"{', '.join(foreign)}")
    return drop_unused_opsets(model)


# passes that leave their input unmodified: the optimize loop gives them no copy (npuflow's
# own run on a weightless copy, registry.PASSES)
# (tests/test_optimize.py checks this on old- and new-IR models)
PURE = frozenset({"onnxslim", "ort_basic", "fold_shape_chains", "remove_noops",
                  "flatten_gemm_bias", "fuse_gelu", "fuse_silu"})


def onnxslim_pass(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxslim: constant folding, dead-code and redundant-node removal, shape cleanup."""
    import onnxslim

    saved = onnx.GraphProto()  # slim's freeze() drops initializer inputs in place
    saved.input.extend(model.graph.input)
    try:
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()), linear_slim():
            out = onnxslim.slim(model)
    finally:
        del model.graph.input[:]
        model.graph.input.extend(saved.input)
    return _portable(model, out, "onnxslim")


def ort_basic_pass(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's basic graph optimizations (constant folding, redundant nodes)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "basic.onnx")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = path
        options.log_severity_level = 3
        options.intra_op_num_threads = 1
        ort.InferenceSession(model.SerializeToString(), options,
                             providers=["CPUExecutionProvider"])
        out = onnx.load(path)
    return _portable(model, out, "ort_basic")


def onnxsim_pass(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx-simplifier (optional extra npuflow[onnxsim]), checked by its own validation."""
    try:
        import onnxsim
    except ImportError as exc:
        raise UserError("optimize.passes: pass 'onnxsim' needs pip install 'npuflow[onnxsim]'"
                        ) from exc

    out, ok = onnxsim.simplify(model)
    if not ok:
        raise PassNotApplicable("onnxsim could not validate its output")
    return _portable(model, out, "onnxsim")
