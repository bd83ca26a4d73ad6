"""tensorscatter-decompose: TensorScatter (opset 24, a KV-cache update) as Concat/Slice or one row Gather.

Why: TensorRT's ONNX parser first lists TensorScatter in 10.15 (operator table at the 10.15 ref
fa5aa9f6, changelog 10.15); earlier parsers fail with "No importer registered for op:
TensorScatter". From 10.15 on the table restricts it to "past_cache and update must be rank 4;
axis must be -2": a 3-D cache, or a sequence axis elsewhere, is refused on every release. The op
exists for static KV caches (its spec: "KV cache updates for Attention ops commonly found in
LLMs"): an opset-24 decoder graph writes it in front of Attention for each of key and value.

How, exact for every type (values are copied, never recomputed):

* no ``write_indices`` (prefill: every batch writes at 0): ``Concat(update, past[seq:])`` along the
  sequence axis (``update`` itself when both lengths are static and equal). Same for both modes:
  the spec requires ``sequence_length <= max_sequence_length``.
* ``write_indices`` ``w`` (decode): each cache position ``p`` of batch ``b`` takes update row
  ``j = p - w[b]`` when ``0 <= j < seq`` (circular: ``j = (p - w[b]) mod max``, as
  ``p - (w - (w / max) * max)`` plus ``max`` where negative: no Mod, which parsers before 8.5
  lack; exact for ``w >= 0``), else keeps the past row. Both tensors are flattened to rows at the
  sequence axis (``Flatten``: ``[batch * D1 * ... * positions, rest]``, no transpose), concatenated,
  and one ``Gather`` picks every output row by a source index built with Range/Where: the
  ScatterND-free form (ScatterND is refused or miscomputed by several releases, see
  scatternd-decompose).

Cost (``bench/newops_latency.py``, onnxruntime 1.32 CPU, 1 thread, a shared and noisy machine), a (4, 8, 2048, 128) fp32 cache: prefill 1.5x, a one-token decode 3.4x the native op
(onnxruntime copies the cache too when it cannot update in place; the Gather form copies it twice).

Linear mode with ``w + seq > max`` is outside the spec (an out-of-bounds write); the rewrite then
drops the rows past the end. A negative ``write_indices`` is outside it too.

Left out (findings): unknown rank, an ``axis`` of 0 (the spec forbids it).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, optional_input, replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._indexing import Dim, arange, dim_tensor, dims_of, mul, shape_tensor
from graphfix.passes.base import LIMIT, NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.support import evidence

_INT_MAX = np.iinfo(np.int64).max


def _axis(node: gs.Node) -> tuple[int, int] | None:
    """(normalised axis, rank) of the cache, or None where the rank is unknown."""
    shape = node.inputs[0].shape
    if shape is None:
        return None
    rank = len(shape)
    axis = int(node.attrs.get("axis", -2))
    return (axis + rank if axis < 0 else axis), rank


def _outside_importer_limits(node: gs.Node, ctx: Context) -> bool:
    """10.15+ imports rank-4 caches with the sequence axis at -2 only."""
    found = _axis(node)
    return found is None or found[1] != 4 or found[0] != 2


def rewrite(node: gs.Node, ctx: Context) -> None:
    past, update = node.inputs[0], node.inputs[1]
    found = _axis(node)
    if found is None or update.shape is None:
        raise Skip("cache rank is unknown (run shape inference upstream)")
    axis, rank = found
    if not 0 < axis < rank:
        raise Skip(f"axis {node.attrs.get('axis', -2)} is not a sequence axis of a rank-{rank} cache (batch axis 0 is not allowed)")
    mode = node.attrs.get("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("linear", "circular"):
        raise Skip(f"mode {mode!r} is not a TensorScatter mode (linear, circular)")
    b = ctx.builder
    dims, seq = dims_of(b, past), dims_of(b, update)[axis]
    writes = optional_input(node, 2)
    if writes is None:
        out = _prefill(b, past, update, axis, dims[axis], seq)
    else:
        out = _gather_rows(b, past, update, writes, axis, dims, seq, mode == "circular")
    replace_tensor(ctx.graph, node.outputs[0], out)


def _prefill(b: Builder, past: gs.Tensor, update: gs.Tensor, axis: int, length: Dim, seq: Dim) -> gs.Tensor:
    if isinstance(length, int) and isinstance(seq, int) and length == seq:
        return b.op("Identity", [update])
    start = np.array([seq], np.int64) if isinstance(seq, int) else b.unsqueeze(seq, [0])
    return b.concat([update, b.slice(past, start, np.array([_INT_MAX], np.int64), axes=[axis])], axis)


def _gather_rows(b: Builder, past: gs.Tensor, update: gs.Tensor, writes: gs.Tensor, axis: int, dims: list[Dim],
                 seq: Dim, circular: bool) -> gs.Tensor:
    i64 = np.int64

    def t(d: Dim) -> gs.Tensor:
        return dim_tensor(b, d)

    def op(name: str, *xs: gs.Tensor | np.ndarray) -> gs.Tensor:
        return b.op(name, list(xs))

    length, groups = dims[axis], mul(b, *dims[:axis])  # positions; batch * D1 * ... * D(axis-1)
    table = b.concat([b.op("Flatten", [past], {"axis": axis + 1}), b.op("Flatten", [update], {"axis": axis + 1})], 0)
    p = arange(b, length)  # [max]
    w = b.unsqueeze(b.cast(writes, i64) if writes.dtype not in (None, i64, np.dtype(i64)) else writes, [1])  # [B, 1]
    if circular:
        w = op("Sub", w, op("Mul", op("Div", w, t(length)), t(length)))
        d = op("Sub", p, w)
        j = op("Where", op("Less", d, np.array(0, i64)), op("Add", d, t(length)), d)
        valid = op("Less", j, t(seq))
    else:
        j = op("Sub", p, w)
        valid = op("And", op("Not", op("Less", j, np.array(0, i64))), op("Less", j, t(seq)))
    # row groups (b, k) numbered b * P + k, shaped [B, P, 1]; positions broadcast over P
    group = b.reshape(arange(b, groups), shape_tensor(b, [dims[0], -1, 1]))
    j, valid = b.unsqueeze(j, [1]), b.unsqueeze(valid, [1])
    from_update = op("Add", t(mul(b, groups, length)), op("Add", op("Mul", group, t(seq)), j))  # after every past row
    from_past = op("Add", op("Mul", group, t(length)), p)
    source = b.reshape(op("Where", valid, from_update, from_past), np.array([-1], i64))
    rows = b.op("Gather", [table, source], {"axis": 0})
    return b.reshape(rows, shape_tensor(b, dims))


PASS = Pass(
    name="tensorscatter-decompose",
    summary="Rewrite TensorScatter (opset 24 KV-cache update, linear/circular) into Concat/Slice or one row Gather.",
    ops=frozenset({"TensorScatter"}),
    rules=(
        Rule(NO_IMPORTER, "<10.15", "no TensorScatter importer before TensorRT 10.15",
             error="unsupported-op-plugin-fallback-generic",
             evidence=evidence("10.15")),
        Rule(LIMIT, ">=10.15", "TensorScatter on a cache that is not rank 4 with the sequence axis at -2",
             _outside_importer_limits,
             evidence="operator table 10.15-11.1: \"past_cache and update must be rank 4; axis must be -2\""),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
