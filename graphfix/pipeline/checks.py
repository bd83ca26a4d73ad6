"""A run's checks of its model: validity measured against the input's own defects, and TensorRT
readiness before and after.
"""

from __future__ import annotations

from typing import Any

import onnx
import onnx_graphsurgeon as gs

from graphfix.check.findings import check_graph, check_model
from graphfix.errors import GraphfixError
from graphfix.onnxio.ir import default_opset, runtime_compatible
from graphfix.onnxio.proto import Assembled
from graphfix.onnxio.validate import checker_problem, declared_shapes, relaxed_problem
from graphfix.report.model import Report


def _invalid(model: onnx.ModelProto, full_check: bool, source: onnx.ModelProto | None = None,
             report: Report | None = None) -> str | None:
    """onnx.checker's complaint about a rewritten ``model``. With ``source`` (the input), a full
    check's shape conflict that vanishes once the input's own declared shapes are forgotten is the
    input's defect, not the rewrite's (onnxio.validate.relaxed_problem); the report says so once."""
    try:
        problem = checker_problem(runtime_compatible(model), full_check)
    except GraphfixError as exc:
        return str(exc)
    if problem and full_check and source is not None and "ShapeInferenceError" in problem:
        relaxed = relaxed_problem(model, _declared(source))
        note = f"the input declares shapes it does not compute ({problem}); no rewrite is rolled back for it"
        if relaxed is None and report is not None and note not in report.notes:
            report.notes.append(note)
        return relaxed
    return problem


def _declared(source: onnx.ModelProto) -> frozenset[str]:
    """The input's declared tensors, measured once per input model."""
    cached = _DECLARED.get(id(source))
    if cached is None or cached[0] is not source:
        _DECLARED.clear()
        cached = _DECLARED[id(source)] = (source, declared_shapes(source))
    return cached[1]


_DECLARED: dict[int, tuple[onnx.ModelProto, frozenset[str]]] = {}


def _check(model: onnx.ModelProto, trt: str | None):
    """`graphfix check` of ``model`` for ``trt`` (None without a target)."""
    if trt is None:
        return None

    return check_model(model, trt)


def check_fixed(graph: gs.Graph, fixed: Assembled, trt: str):
    """`graphfix check` of the fixed model on the graph it was exported from (pruned and sorted
    by the export): no second import, and the weights are not copied into one ModelProto."""

    return check_graph(graph, trt, default_opset(fixed.stub), {t.data_type for t in fixed.initializers})


def trt_summary(before, after, trt: str) -> dict[str, Any]:
    """`graphfix check` before (the input's report) and after: what the target still rejects."""
    return {"version": trt, "before": before.as_dict(), "after": after.as_dict()}
