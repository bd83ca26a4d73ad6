"""reduce-axes-input: opset-18 ReduceMean/Max/Min/L1/L2/SumSquare/LogSum/LogSumExp with an axes
input, rewritten into ops parsers before 10.0 read correctly.

Why: opset 18 moved the ``axes`` of every Reduce op but ReduceSum from an attribute to an input.
The importers before 10.0 read only the attribute; without it they reduce over *every* axis, and
the parser says nothing (opsets newer than it knows are only a warning). Dynamo exports are
opset 18+, so a ``x.mean(-1)`` (hand-written LayerNorm, mean pooling, attention statistics) built
on TensorRT 8.6 or a Jetson's 8.5 silently returns one number per batch. ReduceSum read its axes
input from opset 13 on, and TopK its K input, in every 8.x importer.

Rewrite (axes folded to constants; negative axes normalized):

* ReduceMean = ReduceSum / count; count is a constant for static dims, else
  ``Cast(ReduceProd(Gather(Shape(x), axes)))`` (a ReduceProd without axes reduces everything,
  which every release reads the same way);
* ReduceL1 = ReduceSum(Abs), ReduceSumSquare = ReduceSum(x * x), ReduceL2 = Sqrt of that,
  ReduceLogSum = Log(ReduceSum), ReduceLogSumExp = m + Log(ReduceSum(Exp(x - m))) with m the max
  (as onnxruntime computes it: no overflow for large x);
* ReduceMax/ReduceMin = TopK(K=1) along each axis in turn (keepdims), then Squeeze; on integers
  over static axes of at most ``PRODUCT_TERMS`` each, a Max/Min of slices instead, since the TopK
  layer takes no INT32 before 8.6 (int-argmax-topk rewrites the TopK otherwise, when exact).

* ReduceProd = a Mul of slices along static axes (up to ``PRODUCT_TERMS`` terms; Exp/Log would
  lose signs and zeros); over dynamic or longer axes it stays a finding.

Empty or absent axes mean "every axis", which old importers also do, so those nodes are left
alone. The builder writes its own opset-18 max/min/product reductions the same way, so no pass
emits the ignored form.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.graph.build import PRODUCT_TERMS, Skip, lengths
from graphfix.passes.base import WRONG_RESULTS, Context, Pass, Rule

_SUM_FAMILY = {"ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}
_ORDER = {"ReduceMax", "ReduceMin"}
OPS = frozenset(_SUM_FAMILY | _ORDER | {"ReduceProd"})


def _axes_given(node: gs.Node, ctx: Context) -> bool:
    """Opset-18 form with axes that are not "every axis" (a runtime axes tensor counts too)."""
    if ctx.opset < 18 or len(node.inputs) < 2 or not node.inputs[1].name:
        return False
    axes = ctx.folder.value(node.inputs[1])
    return axes is None or axes.size > 0


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    axes_value = ctx.folder.value(node.inputs[1])
    if axes_value is None:
        raise Skip("axes are computed at run time; TensorRT needs them as constants")
    dtype = tensor_dtype(x)
    if x.shape is None or dtype is None:
        raise Skip("input rank or type is unknown (run shape inference upstream)")
    rank = len(x.shape)
    axes = sorted({int(a) % rank if rank else 0 for a in np.asarray(axes_value).reshape(-1)})
    keep = bool(node.attrs.get("keepdims", 1))
    if node.op in _SUM_FAMILY and dtype.kind != "f":
        raise Skip(f"{node.op} on {dtype} (only float types are decomposed)")
    if (node.op in _ORDER or node.op == "ReduceLogSumExp") and any(x.shape[a] == 0 for a in axes):
        raise Skip(f"{node.op} over an empty axis (TopK needs an element; the result is a constant +-inf)")
    b = ctx.builder
    if node.op == "ReduceProd":
        if lengths(x, axes) is None:
            raise Skip(f"ReduceProd over dims that are dynamic or longer than {PRODUCT_TERMS} in all has no form "
                       "old importers read; reduce a reshaped tensor upstream")
        y = b.product(x, axes, keep)
    elif node.op in _ORDER and dtype == np.bool_:  # TopK has no bool kernel: compare as 0/1 floats
        y = b.cast(b.extreme(b.cast(x, np.float32), axes, keep, largest=node.op == "ReduceMax"), np.bool_)
    elif node.op in _ORDER and dtype.kind in "iu" and _short_static(x, axes):
        y = _elementwise_extreme(b, x, axes, keep, "Max" if node.op == "ReduceMax" else "Min")
    elif node.op in _ORDER:
        y = b.extreme(x, axes, keep, largest=node.op == "ReduceMax")
    else:
        y = _sum_family(b, node.op, x, axes, keep, dtype)
    replace_tensor(ctx.graph, node.outputs[0], y)


def _short_static(x: gs.Tensor, axes: list[int]) -> bool:
    return all(isinstance(x.shape[a], int | np.integer) and 0 < x.shape[a] <= PRODUCT_TERMS for a in axes)


def _elementwise_extreme(b: Builder, x: gs.Tensor, axes: list[int], keep: bool, op: str) -> gs.Tensor:
    """Max/Min of the slices along each static axis in turn: exact for integers on every release."""
    y = x
    for axis in axes:
        parts = [b.slice(y, [i], [i + 1], [axis]) for i in range(int(x.shape[axis]))]
        y = parts[0] if len(parts) == 1 else b.op(op, parts)
    return y if keep else b.squeeze(y, axes)


def _sum(b: Builder, x: gs.Tensor, axes: list[int], keep: bool) -> gs.Tensor:
    return b.op("ReduceSum", [x, b.const(np.asarray(axes, np.int64), hint="axes")], {"keepdims": int(keep)})


def _count(b: Builder, x: gs.Tensor, axes: list[int], dtype: np.dtype) -> gs.Tensor:
    dims = [x.shape[a] for a in axes]
    if all(isinstance(d, int | np.integer) and d >= 0 for d in dims):  # the reduced dims are static
        return b.const(np.asarray(np.prod(dims), dtype), hint="count")
    dims = b.op("Gather", [b.shape(x), b.const(np.asarray(axes, np.int64), hint="axes")], {"axis": 0})
    return b.cast(b.op("ReduceProd", [dims], {"keepdims": 0}), dtype)


def _sum_family(b: Builder, op: str, x: gs.Tensor, axes: list[int], keep: bool, dtype: np.dtype) -> gs.Tensor:
    if op == "ReduceMean":
        return b.op("Div", [_sum(b, x, axes, keep), _count(b, x, axes, dtype)])
    if op == "ReduceL1":
        return _sum(b, b.op("Abs", [x]), axes, keep)
    if op in ("ReduceSumSquare", "ReduceL2"):
        squares = _sum(b, b.op("Mul", [x, x]), axes, keep)
        return squares if op == "ReduceSumSquare" else b.op("Sqrt", [squares])
    if op == "ReduceLogSum":
        return b.op("Log", [_sum(b, x, axes, keep)])
    m = b.extreme(x, axes, True, largest=True)  # ReduceLogSumExp, shifted by the max
    total = b.op("Log", [_sum(b, b.op("Exp", [b.op("Sub", [x, m])]), axes, True)])
    y = b.op("Add", [m, total])
    return y if keep else b.squeeze(y, axes)


PASS = Pass(
    name="reduce-axes-input",
    summary="Rewrite opset-18 Reduce ops with an axes input (ignored before 10.0) into ReduceSum/TopK forms.",
    ops=OPS,
    rules=(
        Rule(WRONG_RESULTS, "<10.0", "opset-18 Reduce axes input ignored: the importer reduces over every axis",
             _axes_given, evidence="importer source 8.0-9.x (reads the axes attribute only); changelog 10.0"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
