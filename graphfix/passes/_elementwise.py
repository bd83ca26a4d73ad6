"""What the elementwise decompositions share (gelu, swish, swiglu, activation, isinf-isnan,
round-sign, rotary-embedding, causalconv): the default-domain predicate, the float-type check and
Swish's formula. Here so that no pass module imports another (each pass stays one module the
PIPELINE list names)."""

from __future__ import annotations

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
    dtype = tensor_dtype(x)
    if dtype is None or dtype.kind != "f":
        raise Skip(f"input type of {op} is unknown or not a numpy float (run shape inference upstream; bfloat16 is left as is)")
    return dtype


def swish(b: Builder, x: gs.Tensor, alpha: float, dtype: np.dtype) -> gs.Tensor:
    """``x * Sigmoid(alpha * x)`` in ``dtype`` (the ONNX Swish function body)."""
    gate = x if alpha == 1.0 else b.op("Mul", [b.const(np.array(alpha, dtype), hint="alpha"), x], dtype=dtype)
    return b.op("Mul", [x, b.op("Sigmoid", [gate], dtype=dtype)], dtype=dtype)
