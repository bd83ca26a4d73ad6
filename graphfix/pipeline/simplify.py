"""``--simplify``: onnx-simplifier's constant folding and shape simplification, as a verified step.

Users' toolchains name onnxsim before TensorRT; graphfix runs it as one more step, off by default
(extra ``graphfix[simplify]``), verified like a pass against the original model on the same
inputs and rolled back if it changes results, or if it writes an op the target rejects: onnxsim's
optimizer fuses attention/LayerNorm patterns into ``com.microsoft`` contrib ops (a SuperGlue
export gained them), which no TensorRT parser imports.
"""

from __future__ import annotations

import onnx

from graphfix.errors import GraphfixError, first_line
from graphfix.runtime import worker as runtime_worker

MISSING = "--simplify needs onnx-simplifier: pip install 'graphfix[simplify]'"


def simplify(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxsim's simplification of ``model`` (its own check off: graphfix verifies it itself), in
    graphfix's onnxruntime worker process (onnxsim folds constants by running onnxruntime, which
    may crash or never end on a model it cannot run: graphfix.runtime.worker), with the outputs it
    folded to constants computed by Constant nodes (:func:`feed_outputs`)."""
    try:
        import onnxsim  # noqa: F401 - installed? It runs in the worker
    except ImportError as exc:
        raise GraphfixError(MISSING) from exc

    try:
        simplified = onnx.load_from_string(runtime_worker.simplify(model.SerializeToString()))
    except runtime_worker.RuntimeFailure as exc:  # onnxsim raises many types; the run goes on without it
        raise SimplifyFailed(first_line(exc)) from exc
    return feed_outputs(simplified)


def feed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every graph output that onnxsim folded into an initializer computed again, by
    a Constant node: onnx.checker (and so every later step) refuses "Graph output 'x' is not an
    output of any node in graph" (the demo's ``indices1``), and TensorRT's parser wants outputs to
    be layer outputs. Returns ``model`` itself when nothing needs it."""
    produced = {o for n in model.graph.node for o in n.output}
    weights = {t.name: t for t in model.graph.initializer}
    folded = [o.name for o in model.graph.output if o.name not in produced and o.name in weights]
    if not folded:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [t for t in out.graph.initializer if t.name not in folded]
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    kept_inputs = [i for i in out.graph.input if i.name not in folded]  # IR < 4 lists initializers as inputs
    del out.graph.input[:]
    out.graph.input.extend(kept_inputs)
    for name in folded:
        value = onnx.TensorProto()
        value.CopyFrom(weights[name])
        value.name = ""
        out.graph.node.append(onnx.helper.make_node("Constant", [], [name], name=f"{name}_constant", value=value))
    return out


class SimplifyFailed(Exception):
    """onnxsim could not simplify the model (the step is reported as not applied)."""


def new_blockers(before, after) -> list[str]:
    """Blocking findings (op and message) of ``after`` that ``before`` did not have: what the step
    introduced that the target rejects."""
    seen = {(f.op, f.message) for f in before.findings if f.severity == "blocking"}
    return sorted({f"{f.op}: {f.message}" for f in after.findings if f.severity == "blocking" and (f.op, f.message) not in seen})


