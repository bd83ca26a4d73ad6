"""topk-constant-k: a TopK whose K is computed at run time, as a TopK with a constant K and a Slice.

Why: parsers before 8.6 read TopK's K as weights ("This version of TensorRT only supports input K
as an initializer.", importTopK 6.0-8.5-GA; 8.6-GA sets K as a layer input). fold-weights folds a
K that is constant; torchvision's detectors compute it from the data's shape,
``min(pre_nms_top_n, num_anchors)`` (``_topk_min``: ``ReduceMin(Concat(1000, Shape(x)[1]))``, or
``Min``), which does not fold when the anchor count is dynamic.

Rewrite, with a constant bound ``B >= K`` found in the graph (the ``min(const, ...)``'s constant,
the constant of a folded branch, a static dim):

* the scores are padded along the axis with ``B`` fill values (-inf for ``largest``, +inf
  otherwise; for integers the proven bound of ``|x|`` or the type's extremes) when the axis is
  dynamic, so it holds ``B``;
  a static axis of length ``n`` uses ``min(B, n)`` and no padding;
* ``TopK(K=B)``, then values and indices are sliced to ``[0, K)`` along the axis (Slice reads
  starts/ends as shape tensors from 7.0 on; K is computed from shapes, so it is one).

Exact: the first ``K`` of the sorted top ``B`` are the top ``K``, and padding comes after every
real element, fill-valued ones included (ties keep the lower index first), so no padded index is
ever among the first ``K <= n``. ``sorted=0`` is left alone (its order is unspecified, so the
sliced prefix would not be the top K).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.fold import Folder
from graphfix.graph import Builder, is_weights, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._int_bounds import Bounds
from graphfix.passes.base import MUST_BE_WEIGHTS, Context, Pass, Rule

#: Ops that pass K's value through unchanged.
_THROUGH = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Cast", "Concat"})
_DEPTH = 32


def _runtime_k(node: gs.Node, ctx: Context) -> bool:
    """Opset-10 K input that is neither weights nor foldable (fold-weights handles those)."""
    if ctx.opset < 10 or len(node.inputs) < 2 or is_weights(node.inputs[1]):
        return False
    return ctx.folder.value(node.inputs[1]) is None


def upper_bound(t: gs.Tensor, folder: Folder, depth: int = 0) -> int | None:
    """A constant >= every value of ``t`` (a K), from constants, static dims and min() patterns."""
    value = folder.value(t)
    if value is not None:
        return int(np.max(value)) if value.size else None
    node = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
    if node is None or depth > _DEPTH:
        return None
    ins = [i for i in node.inputs if i.name]
    if node.op == "Min":  # below each operand's bound: the smallest known one
        known = [b for b in (upper_bound(i, folder, depth + 1) for i in ins) if b is not None]
        return min(known) if known else None
    if node.op == "ReduceMin":
        return _reduce_min_bound(node, folder, depth)
    if node.op == "Concat" and len(ins) > 1:  # each element is one of the parts'
        parts = [upper_bound(i, folder, depth + 1) for i in ins]
        return None if None in parts else max(parts)  # type: ignore[type-var]
    if node.op in _THROUGH and ins:
        return upper_bound(ins[0], folder, depth + 1)
    if node.op == "Gather" and ins[0].inputs and ins[0].inputs[0].op == "Shape":
        dims = ins[0].inputs[0].inputs[0].shape
        index = folder.value(ins[1])
        if dims is not None and index is not None:
            picked = [dims[int(i)] for i in np.asarray(index).reshape(-1)]
            if all(isinstance(d, int | np.integer) for d in picked):
                return max(int(d) for d in picked)
    return None


def _reduce_min_bound(node: gs.Node, folder: Folder, depth: int) -> int | None:
    """torchvision's ``_topk_min``: ReduceMin over a 1-D Concat is <= each part's bound."""
    x = node.inputs[0]
    if x.shape is None or len(x.shape) != 1:
        return None
    parts = x.inputs[0].inputs if x.inputs and x.inputs[0].op == "Concat" else [x]
    known = [b for b in (upper_bound(p, folder, depth + 1) for p in parts if p.name) if b is not None]
    return min(known) if known else None


def _fill(x: gs.Tensor, dtype: np.dtype, largest: bool, ctx: Context) -> np.generic:
    """A value no real element sorts after: +-inf, or for integers the proven bound of ``|x|`` (ties
    keep real elements first), so int-argmax-topk can still prove the padded data exact; the
    integer extremes when nothing bounds ``x``."""
    if dtype.kind == "f":
        return dtype.type(-np.inf if largest else np.inf)
    bound = Bounds(ctx.folder).bound(x)
    info = np.iinfo(dtype)
    if bound is not None and bound <= info.max:
        return dtype.type(-bound if largest and info.min < 0 else bound if not largest else info.min)
    return dtype.type(info.min if largest else info.max)


def _padded(b: Builder, x: gs.Tensor, axis: int, count: int, fill: np.generic) -> gs.Tensor:
    """``x`` with ``count`` fill values appended along ``axis`` (a constant, or an Expand to x's
    other dims when they are dynamic)."""
    rank = len(x.shape)
    piece = [1] * rank
    piece[axis] = count
    others = [d for i, d in enumerate(x.shape) if i != axis]
    if all(isinstance(d, int | np.integer) for d in others):
        full = [int(d) if i != axis else count for i, d in enumerate(x.shape)]
        filler: gs.Tensor = b.const(np.full(full, fill, fill.dtype), hint="fill")
    else:
        keep = np.ones(rank, np.int64)
        keep[axis] = 0
        shape = b.op("Add", [b.op("Mul", [b.shape(x), keep]), (1 - keep).astype(np.int64)], dtype=np.int64)
        filler = b.op("Expand", [b.const(np.full(piece, fill, fill.dtype), hint="fill"), shape], dtype=fill.dtype)
    return b.concat([x, filler], axis)


def rewrite(node: gs.Node, ctx: Context) -> None:
    x, k = node.inputs[0], node.inputs[1]
    dtype = tensor_dtype(x)
    if x.shape is None or dtype is None:
        raise Skip("input rank or type is unknown (run shape inference upstream)")
    if not int(node.attrs.get("sorted", 1)):
        raise Skip("sorted=0: the order is unspecified, so a prefix of a larger TopK is not its result")
    rank = len(x.shape)
    axis = int(node.attrs.get("axis", -1)) % max(rank, 1)
    n = x.shape[axis]
    static = isinstance(n, int | np.integer)
    bound = upper_bound(k, ctx.folder)
    if bound is not None and static:
        bound = min(bound, int(n))
    elif static:
        bound = int(n)
    if bound is None or bound < 1:
        raise Skip("K is computed at run time and no constant bound for it was found (write it as "
                   "min(constant, size) or make it a constant in the export)")
    b = ctx.builder
    largest = bool(int(node.attrs.get("largest", 1)))
    data = x if static else _padded(b, x, axis, bound, _fill(x, dtype, largest, ctx))
    attrs = {**node.attrs, "axis": axis, "sorted": 1}
    values, indices = b.op("TopK", [data, b.const(np.asarray([bound], np.int64), hint="k")], attrs, outputs=2)
    values.dtype, indices.dtype = dtype, np.dtype(np.int64)
    ends = k if tensor_dtype(k) == np.int64 else b.cast(k, np.int64)
    for old, new in zip(node.outputs, (values, indices), strict=False):
        replace_tensor(ctx.graph, old, b.slice(new, np.asarray([0], np.int64), ends, [axis]))


PASS = Pass(
    name="topk-constant-k",
    summary="Rewrite TopK with a runtime K (min(pre_nms_top_n, anchors)) into a constant-K TopK plus a Slice.",
    ops=frozenset({"TopK"}),
    rules=(
        Rule(MUST_BE_WEIGHTS, ">=6.0,<8.6", "TopK K is computed at run time and does not fold: it must be an initializer",
             _runtime_k, error="topk-k-not-initializer",
             evidence="importer source: importTopK 'This version of TensorRT only supports input K as an initializer.' "
             "(builtin_op_importers.cpp 8.2-GA-8.5-GA; is_weights assert 6.0-8.0); 8.6-GA sets K as a layer input"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
