"""Models of onnxruntime's contrib ops for the contrib lowering tests: onnxruntime itself runs the
original op (its kernels are the reference the ContribOperators spec describes)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
#: (atol, rtol) per input type: fp16 kernels accumulate in float32 and round once more.
TOL = {np.float32: (2e-5, 2e-5), np.float16: (4e-3, 4e-3)}


def ms_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto], outputs: Sequence[onnx.ValueInfoProto],
             initializers: Sequence[onnx.TensorProto] = (), opset: int = 14) -> onnx.ModelProto:
    """A model importing com.microsoft (not checked: onnx's checker knows no contrib op)."""
    graph = helper.make_graph(list(nodes), "contrib", list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, producer_name="graphfix-tests", ir_version=8)


def ms(op: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, list(inputs), list(outputs), name=f"/{op}", domain="com.microsoft", **attrs)


def vi(name: str, dtype: type, shape: Sequence[int | str | None] | None) -> onnx.ValueInfoProto:
    elem = ELEM[dtype] if dtype in ELEM else helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def weight(name: str, shape: Sequence[int], dtype: type, seed: int = 0, scale: float = 1.0) -> onnx.TensorProto:
    return numpy_helper.from_array((scale * np.random.default_rng(seed).standard_normal(shape)).astype(dtype), name)


def floats(shape: Sequence[int], dtype: type, seed: int = 1, scale: float = 1.0) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(dtype)
