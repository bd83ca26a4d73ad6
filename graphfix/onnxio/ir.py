"""The IR version and opsets the installed onnxruntime reads, asked of it: onnx and onnxruntime
disagree on the newest IR version over releases, so it is never hard-coded.
"""

from __future__ import annotations

import functools

import onnx

from graphfix.errors import GraphfixError

#: Default-domain opsets graphfix rewrites (onnxruntime's CPU kernels start at 7; TensorRT parsers at 9).
MIN_OPSET = 7


def default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def _loads(ir_version: int, opset: int) -> bool:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)
    try:
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - "cannot load" is the answer
        return False
    return True


@functools.cache
def runtime_limits() -> tuple[int, int]:
    """(highest IR version, highest default-domain opset) the installed onnxruntime loads, asked of it."""
    ir = next((v for v in range(onnx.IR_VERSION, 6, -1) if _loads(v, 13)), 7)
    opset = next((v for v in range(onnx.defs.onnx_opset_version(), 12, -1) if _loads(ir, v)), 13)
    return ir, opset


def max_ir_version() -> int:
    return runtime_limits()[0]


def runtime_compatible(model: onnx.ModelProto) -> onnx.ModelProto:
    """Clamp the IR version to what onnxruntime reads, without going below what the opsets need."""
    limit = max_ir_version()
    if model.ir_version <= limit:
        return model
    needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    if needed > limit:
        raise GraphfixError(f"needs IR version {needed}; the installed onnxruntime reads at most {limit}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = max(needed, min(model.ir_version, limit))
    return out
