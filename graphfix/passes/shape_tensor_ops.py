"""shape-tensor-ops: Neg/Abs/Relu/Floor/Ceil/Pow/Clip computing a shape tensor, as Sub/Max/Min/Mul/Cast/Less.

Why: the 8.0 and 8.2 parsers refuse shape tensors produced by unary, activation and Pow layers
(onnx-tensorrt 8.0-GA/8.2-GA onnx2trt_utils.cpp ``supportsShapeTensor``: kUNARY and kACTIVATION
return false, ElementWise kPOW returns false; ModelImporter.cpp logs "Found unsupported
shape-tensor producing layer" and ``supportsModel`` fails; the check is gone in 8.4-GA). Exports
compute Reshape/Pad/Resize/Expand inputs that way from shapes: ``-(-h // p)`` ceil-divisions
(Neg), ``math.floor``/``ceil`` of scaled sizes (Floor/Ceil on Cast shapes), ``clamp``/``relu`` of
a size (Clip/Relu), squared sizes (Pow 2): ViTMatte, DINOv2 and Faster R-CNN's transform do.

Rewrite into ElementWise ops the check allows (Sub, Max, Min, Mul, Less, Greater), Cast (an
identity layer) and nothing else, exactly: Neg(x) = 0 - x; Abs(x) = Max(x, 0 - x); Relu(x) =
Max(x, 0); Clip(x, lo, hi) = Min(Max(x, lo), hi) for constant bounds; Pow(x, n) for a constant
integral n in 1..4 = x * ... * x; Floor(x) = t - (x < t) and Ceil(x) = t + (x > t) with
t = Cast(Cast(x, int64)) (any rounding of the inner Cast within one unit gives the same result).
A node whose inputs are all constants (DINOv2's ``num_positions ** 0.5`` as Pow(4.0, 0.5): the
parser builds the layer rather than folding it) becomes its value.
Only nodes whose values come from shapes or constants and that reach a shape input are matched;
Sqrt and fractional powers have no such form: they are reported (``--fix-shapes`` folds them).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.origin import DATA, ValueOrigins, reaches_shape_input
from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import LIMIT, Context, Pass, Rule

#: Ops the 8.0/8.2 parsers cannot compute shape tensors with, and that exports put on shape paths.
OPS = frozenset({"Neg", "Abs", "Relu", "Floor", "Ceil", "Pow", "Clip", "Sqrt"})


def _computes_shape(node: gs.Node, ctx: Context) -> bool:
    """The node reaches a shape input (looked at first: a short forward walk that loads no
    weights) and its values come from shapes/constants/integer inputs."""
    if not node.inputs or not node.outputs or not reaches_shape_input(node.outputs[0], OPS):
        return False
    return ctx.memo("origins", ValueOrigins).of(node.inputs[0]).kind != DATA


def _exponent(node: gs.Node, ctx: Context) -> int | None:
    e = ctx.folder.value(node.inputs[1]) if len(node.inputs) > 1 else None
    if e is None or e.size != 1 or float(e.reshape(-1)[0]) not in (1.0, 2.0, 3.0, 4.0):
        return None
    return int(e.reshape(-1)[0])


def _bounds(node: gs.Node, ctx: Context) -> tuple[gs.Tensor | None, gs.Tensor | None] | None:
    """Clip's bounds as tensors (None: absent), when they are constants; None when computed."""
    out = []
    for k in (1, 2):
        t = node.inputs[k] if len(node.inputs) > k and node.inputs[k].name else None
        if t is not None and ctx.folder.value(t) is None:
            return None
        out.append(t)
    return out[0], out[1]


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    dtype = tensor_dtype(x)
    if dtype is None:
        raise Skip("input type unknown (run shape inference upstream)")
    b = ctx.builder
    folded = ctx.folder.value(node.outputs[0])
    if folded is not None:  # Pow(4.0, 0.5) of constants: the parser builds the layer anyway
        replace_tensor(ctx.graph, node.outputs[0], b.const(folded.astype(dtype), hint="folded"))
        return
    zero = b.const(np.zeros((), dtype), hint="zero")
    op = node.op
    if op == "Neg":
        y = b.op("Sub", [zero, x], dtype=dtype)
    elif op == "Abs" and dtype.kind == "u":
        y = b.op("Identity", [x], dtype=dtype)  # 0 - x would wrap around
    elif op == "Abs":
        y = b.op("Max", [x, b.op("Sub", [zero, x], dtype=dtype)], dtype=dtype)
    elif op == "Relu":
        y = b.op("Max", [x, zero], dtype=dtype)
    elif op == "Clip":
        bounds = _bounds(node, ctx) if ctx.opset >= 11 else (
            *(None if a not in node.attrs else b.const(np.asarray(node.attrs[a], dtype)) for a in ("min", "max")),)
        if bounds is None:
            raise Skip("Clip bounds are computed (fold-clip makes them initializers first)")
        y = x
        if bounds[0] is not None:
            y = b.op("Max", [y, bounds[0]], dtype=dtype)
        if bounds[1] is not None:
            y = b.op("Min", [y, bounds[1]], dtype=dtype)
    elif op == "Pow":
        n = _exponent(node, ctx)
        if n is None:
            raise Skip("exponent is not a constant 1..4: no exact form in the ops a shape tensor allows (--fix-shapes folds it)")
        y = x
        for _ in range(n - 1):
            y = b.op("Mul", [y, x], dtype=dtype)
        if y is x:
            y = b.op("Identity", [x], dtype=dtype)
    elif op in ("Floor", "Ceil"):
        t = b.cast(b.cast(x, np.int64), dtype)
        if op == "Floor":
            y = b.op("Sub", [t, b.cast(b.op("Less", [x, t], dtype=np.bool_), dtype)], dtype=dtype)
        else:
            y = b.op("Add", [t, b.cast(b.op("Greater", [x, t], dtype=np.bool_), dtype)], dtype=dtype)
    else:
        raise Skip(f"{op} has no exact form in the ops a shape tensor allows (--fix-shapes folds it at a fixed size)")
    replace_tensor(ctx.graph, node.outputs[0], y)


PASS = Pass(
    name="shape-tensor-ops",
    summary="Rewrite Neg/Abs/Relu/Floor/Ceil/Pow/Clip that compute shape tensors into ops 8.0/8.2 can compute them with.",
    ops=OPS,
    rules=(
        Rule(LIMIT, ">=8.0,<8.4", "computes a shape tensor with a unary/activation/Pow layer, which this parser refuses "
             "('Found unsupported shape-tensor producing layer')", _computes_shape,
             error="layer-cannot-compute-shape-tensor",
             evidence="onnx-tensorrt 8.0-GA/8.2-GA onnx2trt_utils.cpp supportsShapeTensor (kUNARY, kACTIVATION, kPOW false), "
                      "ModelImporter.cpp; removed in 8.4-GA"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    forced=lambda node, ctx: True,  # --force: the same values anywhere, not only on shape paths
)
