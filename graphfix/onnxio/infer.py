"""onnx's shape inference, from scratch, on a weightless model (a ModelProto or its bytes).

One function for both places it runs: in-process (:func:`graphfix.graph.convert.infer`) and in
graphfix's worker, beside the import of a big graph (:mod:`graphfix.pipeline.load_checks`).
"""

from __future__ import annotations

import onnx


def inferred(work: onnx.ModelProto | bytes) -> onnx.ModelProto | None:
    """``work`` with every value_info onnx can infer (data propagation on: shape arithmetic is
    followed); None when inference gives up (custom ops, malformed graphs)."""
    try:
        return onnx.shape_inference.infer_shapes(work, data_prop=True)
    except Exception:  # noqa: BLE001 - custom ops or malformed: the caller rewrites with what it knows
        return None
