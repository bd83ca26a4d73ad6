"""What the elementwise decompositions share (gelu, swish, swiglu, activation, isinf-isnan,
round-sign, rotary-embedding, causalconv): the default-domain predicate, the float-type check and
Swish's formula. Here so that no pass module imports another (each pass stays one module the
PIPELINE list names)."""

from __future__ import annotations

import math

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import Context


def onnx_domain(node: gs.Node, ctx: Context) -> bool:
    """A default-domain node (not onnxruntime's com.microsoft namesakes)."""
    return (node.domain or "") in ("", "ai.onnx")


def float_dtype(x: gs.Tensor, op: str) -> np.dtype:
    """``x``'s float dtype, or Skip (unknown, or one numpy has no constants of: bfloat16)."""
    dtype = tensor_dtype(x) or through_producers(x)
    if dtype is None or dtype.kind != "f":
        raise Skip(f"input type of {op} is unknown or not a numpy float (run shape inference upstream; bfloat16 is left as is)")
    return dtype


SQRT_2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715


def _gelu_const(b: Builder, v: float, dtype: np.dtype) -> gs.Constant:
    return b.const(np.array(v, dtype), hint="gelu")


def erf_gelu(b: Builder, x: gs.Tensor, dtype: np.dtype) -> gs.Tensor:
    """``(0.5 * x) * (1 + Erf(x / sqrt(2)))`` in ``dtype`` (ONNX Gelu-20, approximate="none")."""
    erf = b.op("Erf", [b.op("Div", [x, _gelu_const(b, SQRT_2, dtype)])])
    return b.op("Mul", [b.op("Mul", [x, _gelu_const(b, 0.5, dtype)]), b.op("Add", [erf, _gelu_const(b, 1.0, dtype)])])


def tanh_gelu(b: Builder, x: gs.Tensor, dtype: np.dtype) -> gs.Tensor:
    """Gelu's tanh form: sqrt(2/pi) * (x + 0.044715 x^3) as sqrt(2/pi) x * (1 + 0.044715 x x)."""
    poly = b.op("Add", [b.op("Mul", [b.op("Mul", [x, _gelu_const(b, TANH_CUBIC, dtype)]), x]), _gelu_const(b, 1.0, dtype)])
    tanh = b.op("Tanh", [b.op("Mul", [poly, b.op("Mul", [x, _gelu_const(b, SQRT_2_OVER_PI, dtype)])])])
    return b.op("Mul", [b.op("Add", [tanh, _gelu_const(b, 1.0, dtype)]), b.op("Mul", [x, _gelu_const(b, 0.5, dtype)])])


def swish(b: Builder, x: gs.Tensor, alpha: float, dtype: np.dtype) -> gs.Tensor:
    """``x * Sigmoid(alpha * x)`` in ``dtype`` (the ONNX Swish function body)."""
    gate = x if alpha == 1.0 else b.op("Mul", [b.const(np.array(alpha, dtype), hint="alpha"), x], dtype=dtype)
    return b.op("Mul", [x, b.op("Sigmoid", [gate], dtype=dtype)], dtype=dtype)


#: Ops whose float output has their float inputs' type (a MatMul after a contrib op: its weight says it).
_SAME_TYPE = frozenset({"MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Conv", "Transpose", "Reshape", "Identity", "Relu",
                        "Sigmoid", "Tanh", "Erf", "Softmax", "Neg"})


def through_producers(t: gs.Tensor, depth: int = 4) -> np.dtype | None:
    """The float type of an untyped tensor from the typed inputs of the ops that made it (a few steps up)."""
    for _ in range(depth):
        producer = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
        if producer is None or producer.op not in _SAME_TYPE:
            return None
        for i in producer.inputs:
            dtype = tensor_dtype(i) if i.name else None
            if dtype is not None and dtype.kind == "f":
                return dtype
        t = producer.inputs[0]
    return None
