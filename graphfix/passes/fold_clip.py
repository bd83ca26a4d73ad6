"""fold-clip: Clip bounds as initializers; computed or integer Clip as Max/Min.

TensorRT 7.0-8.2 parsers lower Clip to an activation whose alpha/beta must be known at parse time:
"Clip min value must be an initializer!" / "Clip max value must be an initializer!" for any
computed bound (Constant->Cast, Shape arithmetic, F.normalize's clamp_min). The 7.x parser also
crashes on an empty optional bound, and TensorRT's Clip is float-only (8.x types FP32/FP16/INT8).

Rewrite: foldable bounds become scalar initializers of the input's type (empty trailing bounds are
dropped; an empty min with a max becomes Min); bounds that depend on runtime values, and every
integer Clip, become ``Min(Max(x, lo), hi)``, which equals Clip also when lo > hi (ONNX: all
values become hi).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import is_weights, replace_tensor, tensor_dtype
from graphfix.passes.base import MUST_BE_WEIGHTS, TYPE, Context, Pass, Rule


def _is_integer(t: gs.Tensor) -> bool:
    dtype = tensor_dtype(t)
    return dtype is not None and dtype.kind in "iu"


def _computed_bounds(node: gs.Node, ctx: Context) -> bool:
    """A bound that is not weights; an empty optional bound crashes the 7.x importer too."""
    return ctx.opset >= 11 and len(node.inputs) >= 2 and not all(is_weights(b, empty=False) for b in node.inputs[1:])


def _integer_clip(node: gs.Node, ctx: Context) -> bool:
    return ctx.opset >= 11 and len(node.inputs) >= 2 and _is_integer(node.inputs[0])


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    dtype = tensor_dtype(x)
    bounds: list[gs.Tensor | None] = [b if b.name else None for b in node.inputs[1:3]]
    bounds += [None] * (2 - len(bounds))
    folded = [None if b is None else ctx.folder.value(b) for b in bounds]
    if dtype is not None:
        folded = [None if v is None else np.asarray(v, dtype=dtype).reshape(()) for v in folded]
    lo, hi = bounds
    constant = all(b is None or v is not None for b, v in zip(bounds, folded, strict=True))

    if constant and not (dtype is not None and dtype.kind in "iu") and lo is not None:  # _is_integer(x), typed once
        # Still a Clip (TensorRT's fused activation): scalar initializer bounds, trailing empty dropped.
        new_inputs = [x, ctx.builder.const(folded[0], hint="min")]
        if hi is not None:
            new_inputs.append(ctx.builder.const(folded[1], hint="max"))
        node.inputs.clear()
        node.inputs.extend(new_inputs)
        return

    y: gs.Tensor = x
    for op, bound, value in (("Max", lo, folded[0]), ("Min", hi, folded[1])):
        if bound is None:
            continue
        operand = ctx.builder.const(value, hint=op.lower()) if value is not None else bound
        y = ctx.builder.op(op, [y, operand], dtype=node.outputs[0].dtype, shape=node.outputs[0].shape)
    replace_tensor(ctx.graph, node.outputs[0], y)


PASS = Pass(
    name="fold-clip",
    summary="Fold Clip min/max into initializers; lower computed or integer Clip to Max/Min.",
    ops=frozenset({"Clip"}),
    rules=(
        # 8.2+ lowers computed bounds and INT32 input to elementwise max/min itself (onnx-tensorrt#721)
        Rule(MUST_BE_WEIGHTS, ">=7.0,<8.2", "Clip min/max must be an initializer (computed or empty bound)",
             _computed_bounds, error="clip-bound-not-initializer", evidence="importer source; onnx-tensorrt#586, #721"),
        Rule(TYPE, ">=7.0,<8.2", "integer Clip (the activation layer is float-only)", _integer_clip,
             error="clip-bound-not-initializer", evidence="operator table (FP32/FP16/INT8 only)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
