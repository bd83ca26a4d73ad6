"""``--simplify``: onnx-simplifier's constant folding and shape simplification, as a verified step.

Users' toolchains name onnxsim before TensorRT; graphfix runs it as one more step, off by default
(extra ``graphfix[simplify]``), verified like a pass against the original model on the same
inputs and rolled back if it changes results, or if it writes an op the target rejects: onnxsim's
optimizer fuses attention/LayerNorm patterns into ``com.microsoft`` contrib ops (a SuperGlue
export gained them), which no TensorRT parser imports.
"""

from __future__ import annotations

import onnx

from graphfix.errors import GraphfixError
from graphfix.model_io import first_line

MISSING = "--simplify needs onnx-simplifier: pip install 'graphfix[simplify]'"


def simplify(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxsim's simplification of ``model`` (its own check off: graphfix verifies it itself), in
    graphfix's onnxruntime worker process: onnxsim folds constants by running onnxruntime, which
    may crash or never end on a model it cannot run (graphfix.runtime_worker)."""
    try:
        import onnxsim  # noqa: F401 - installed? It runs in the worker
    except ImportError as exc:
        raise GraphfixError(MISSING) from exc
    from graphfix import runtime_worker

    try:
        return onnx.load_from_string(runtime_worker.simplify(model.SerializeToString()))
    except runtime_worker.RuntimeFailure as exc:  # onnxsim raises many types; the run goes on without it
        raise SimplifyFailed(first_line(exc)) from exc


class SimplifyFailed(Exception):
    """onnxsim could not simplify the model (the step is reported as not applied)."""


def new_blockers(before, after) -> list[str]:
    """Blocking findings (op and message) of ``after`` that ``before`` did not have: what the step
    introduced that the target rejects."""
    seen = {(f.op, f.message) for f in before.findings if f.severity == "blocking"}
    return sorted({f"{f.op}: {f.message}" for f in after.findings if f.severity == "blocking" and (f.op, f.message) not in seen})


