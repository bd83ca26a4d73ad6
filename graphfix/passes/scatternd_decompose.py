"""scatternd-decompose: ScatterND as Gathers (constant indices) or a one-hot grid (runtime indices).

Why: in-place index assignment (``x[idx] = y``, ``index_put_``, KV-cache writes) exports to
ScatterND, which TensorRT parsers before 8.2 do not import ("No importer registered for op:
ScatterND", errors.json ``scatternd-not-supported``). From 8.2 the ``reduction`` attribute
(opset 16+) is silently ignored before 10.0 (plain overwrite: wrong results) and rejected from
10.0. scatternd-cast (later in the pipeline) rewrites the reductions whose indices are constants
for >= 8.2; this pass owns everything before 8.2 and the runtime-index reductions from 8.2 on.

How (``data`` flattened to ``[rows, S]`` with rows = prod(data.shape[:k]), updates to ``[U, S]``,
the k index columns to one linear row index, negatives + dim):

* constant indices, static leading dims: a constant source map, output =
  ``Gather(Concat(data, updates), map)``; duplicates: the last write wins (onnxruntime's order).
  Reductions gather each target's updates into a padded ``[targets, max duplicates, S]`` table
  and ReduceSum/Prod/Max/Min it, then ``data op reduced`` on those rows only. Exact (float
  add/mul with duplicates: the summation order differs from onnxruntime's sequential one).
* runtime indices: ``grid = Equal(arange(rows)[:, None], lin[None, :])`` (rows x U booleans).
  ``none``: the last writer of each row is ReduceMax of ``Cast(grid) * (u + 1)`` in float32, and
  one Gather picks each row from the data or from that update (exact, any dtype; the index is
  shaped so the Gather's output already has the data's shape). With k >= 2 static indexed dims
  and U <= 2048 the rows split into hi x lo and the grid is never built: earlier duplicates are
  dropped with a U x U grid, then ``MatMul(onehot(hi) * (u + 1), onehot(lo)^T)`` gives the writer
  per cell (SuperPoint's 4800-cell x 1024-keypoint write: 24x -> 3.8x native in onnxruntime).
  Reductions: ``data op ReduceX(Where(grid[:, None, :], updates^T, neutral))`` over U: rows x S x
  U elements; rows nobody writes reduce to the neutral element (-0.0 for float add), which leaves
  the data bit for bit.

Memory (static shapes; above 2^25 = 33.5M elements the node is left as is with a finding): the
runtime grid holds rows x U elements for ``none`` (BOOL, then float32: 5 bytes each, 168 MB at
the limit), U x U + (hi + lo) x U in the factored form, rows x S x U for reductions. Dynamic
shapes are rewritten unbounded (their size is unknown when the pass runs). Constant source maps
up to 2^22 rows.

Precision: writer numbers are float32 (ReduceMax is float-only before TensorRT 9): exact up to
2^24 updates; a TensorRT build with FP16 enabled may run those layers in half precision, exact up
to 2048 updates only (the factored MatMul form is limited to 2048 for the same reason, TF32).
Integer reductions use ReduceX on integers, which the 8.x operator tables list for FP32/FP16 only.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._indexing import (
    MAX_FACTORED_UPDATES,
    MAX_MAP_ENTRIES,
    Dim,
    check_grid,
    dims_of,
    gather_written,
    known_nonnegative,
    last_writer,
    last_writer_factored,
    linear_index,
    mul,
    numpy_linear,
    one_hot,
    reduce_into,
    restore_shape,
    scatter_operands,
    scatter_rows_constant,
    shape_tensor,
)
from graphfix.passes.base import LIMIT, NO_IMPORTER, WRONG_RESULTS, Context, Pass, Rule


def _runtime_reduction(node: gs.Node, ctx: Context) -> bool:
    """A reduction whose indices are not known before runtime (scatternd-cast takes the constant ones)."""
    return node.attrs.get("reduction", "none") != "none" and ctx.folder.value(node.inputs[1]) is None


def rewrite(node: gs.Node, ctx: Context) -> None:
    data, indices, updates, reduction, dtype = scatter_operands(node)
    k = indices.shape[-1]
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise Skip("the last dim of indices is not static")
    k, q = int(k), len(indices.shape)
    b = ctx.builder
    dims = dims_of(b, data)
    lead, trailing = dims[:k], dims[k:]
    rows = mul(b, *lead)
    value = ctx.folder.value(indices) if isinstance(rows, int) and rows <= MAX_MAP_ENTRIES else None
    if value is not None:
        sizes = [int(d) for d in lead]  # type: ignore[arg-type]
        out = scatter_rows_constant(b, _rows(b, data, k, trailing), _rows(b, updates, q - 1, trailing), numpy_linear(value, sizes),
                                    int(rows), reduction, dtype, sizes)  # type: ignore[arg-type]
        replace_tensor(ctx.graph, node.outputs[0], out)
        return
    n_updates = mul(b, *dims_of(b, indices)[:-1])
    flat_idx = b.op("Flatten", [indices], {"axis": q - 1})  # [U, k]
    nonneg = known_nonnegative(indices, ctx.folder)
    if reduction == "none":
        j = _factor_split(lead, n_updates)
        if j is not None:  # rows = hi x lo: two small one-hots and a MatMul instead of rows x U
            n_hi, n_lo = int(np.prod(lead[:j])), int(np.prod(lead[j:]))  # type: ignore[arg-type]
            check_grid("updates x updates", n_updates, n_updates)
            hi = linear_index(b, flat_idx, lead[:j], nonneg)
            lo = linear_index(b, flat_idx, lead[j:], nonneg, first=j)
            last = last_writer_factored(b, hi, lo, n_hi, n_lo, int(n_updates))  # type: ignore[arg-type]
        else:
            check_grid("data rows x updates", rows, n_updates)
            last = last_writer(b, one_hot(b, linear_index(b, flat_idx, lead, nonneg), rows, n_updates), n_updates)
        out = gather_written(b, _rows(b, data, k, trailing), _rows(b, updates, q - 1, trailing), last, rows, n_updates,
                             index_shape=shape_tensor(b, lead) if k > 1 else None)
    else:
        check_grid("data rows x updates x row size", rows, n_updates, mul(b, *trailing))
        grid = one_hot(b, linear_index(b, flat_idx, lead, nonneg), rows, n_updates)  # [rows, U]
        data2 = b.op("Flatten", [data], {"axis": k})  # [rows, S]
        upd_t = b.transpose(b.op("Flatten", [updates], {"axis": q - 1}), [1, 0])  # [S, U]: reduce over the last axis
        out = restore_shape(b, reduce_into(b, data2, b.unsqueeze(grid, [-2]), upd_t, reduction, dtype), data)  # type: ignore[arg-type]
    replace_tensor(ctx.graph, node.outputs[0], out)


def _factor_split(lead: list[Dim], updates: Dim) -> int | None:
    """Where to split the indexed dims into hi x lo for the factored last writer, if it is cheaper."""
    if len(lead) < 2 or not all(isinstance(d, int) for d in lead) or not isinstance(updates, int):
        return None
    if updates > MAX_FACTORED_UPDATES:
        return None
    sizes = [int(d) for d in lead]  # type: ignore[arg-type]
    j = max(range(1, len(sizes)), key=lambda s: min(np.prod(sizes[:s]), np.prod(sizes[s:])))
    n_hi, n_lo = int(np.prod(sizes[:j])), int(np.prod(sizes[j:]))
    return j if n_hi + n_lo + updates < n_hi * n_lo else None


def _rows(b: Builder, x: gs.Tensor, lead: int, trailing: list[Dim]) -> gs.Tensor:
    """``x`` with its ``lead`` leading dims merged into one: ``[rows, *trailing]``."""
    if lead == 1:
        return x
    if lead == 0:
        return b.unsqueeze(x, [0])
    return b.reshape(x, shape_tensor(b, [-1, *trailing]))


PASS = Pass(
    name="scatternd-decompose",
    summary="Rewrite ScatterND (any reduction) as Gathers over Concat(data, updates), or a one-hot grid for runtime indices.",
    ops=frozenset({"ScatterND"}),
    rules=(
        Rule(NO_IMPORTER, "<8.2-EA", "no ScatterND importer", error="scatternd-not-supported",
             evidence="operator table (ScatterND from 8.2-EA)"),
        # No error ids on the reduction rules: errors.json's scatternd-reduction-attribute is explained
        # (one pass per id) by scatternd-cast; these findings still carry their own message.
        Rule(WRONG_RESULTS, ">=8.2-EA,<10.0", "reduction with runtime indices silently ignored (plain overwrite)", _runtime_reduction,
             evidence="importer source 8.2/8.6/9.3"),
        Rule(LIMIT, ">=10.0", "reduction with runtime indices rejected (\"Attribute reduction is not supported\")", _runtime_reduction,
             evidence="importer source 10.1"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
