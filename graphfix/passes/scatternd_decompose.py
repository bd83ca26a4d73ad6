"""scatternd-decompose: ScatterND as Gathers (constant indices) or a one-hot grid (runtime indices).

Why: in-place index assignment (``x[idx] = y``, ``index_put_``, KV-cache writes) exports to
ScatterND, which TensorRT parsers before 8.2 do not import ("No importer registered for op:
ScatterND", errors.json ``scatternd-not-supported``). From 8.2 the ``reduction`` attribute
(opset 16+) is silently ignored before 10.0 (plain overwrite: wrong results) and rejected from
10.0. scatternd-cast (order 20) rewrites the reductions whose indices are constants for >= 8.2;
this pass owns everything before 8.2 and the runtime-index reductions from 8.2 on.

How (``data`` flattened to ``[rows, S]`` with rows = prod(data.shape[:k]), updates to ``[U, S]``,
the k index columns to one linear row index, negatives + dim):

* constant indices, static leading dims: a constant source map, output =
  ``Gather(Concat(data, updates), map)``; duplicates: the last write wins (onnxruntime's order).
  Reductions gather each target's updates into a padded ``[targets, max duplicates, S]`` table
  and ReduceSum/Prod/Max/Min it, then ``data op reduced`` on those rows only. Exact (float
  add/mul with duplicates: the summation order differs from onnxruntime's sequential one).
* runtime indices: ``grid = Equal(arange(rows)[:, None], lin[None, :])`` (rows x U booleans).
  ``none``: the last writer of each row is ReduceMax of ``Where(grid, u + 1, 0)`` in float32, and
  one Gather picks each row from the data or from that update (exact, any dtype). Reductions:
  ``ReduceX(Where(grid[..., None], updates, neutral))`` over U, then ``Where(hit, data op red,
  data)``: rows x U x S elements.

Memory: the runtime grid holds rows x U elements for ``none`` (BOOL + float32) and rows x U x S
for reductions; above 2^25 elements (static shapes) the node is left as is with a finding.
Dynamic shapes are rewritten unbounded (their size is unknown when the pass runs). Integer
reductions use ReduceX on integers, which the 8.x operator tables list for FP32/FP16 only.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.passes._indexing import (
    MAX_MAP_ENTRIES,
    check_grid,
    check_reduction,
    dims_of,
    known_nonnegative,
    linear_index,
    mul,
    numpy_linear,
    restore_shape,
    scatter_rows_constant,
    scatter_rows_runtime,
)
from graphfix.passes.base import LIMIT, NO_IMPORTER, WRONG_RESULTS, Context, Pass, Rule, Skip


def _runtime_reduction(node: gs.Node, ctx: Context) -> bool:
    """A reduction whose indices are not known before runtime (scatternd-cast takes the constant ones)."""
    return node.attrs.get("reduction", "none") != "none" and ctx.folder.value(node.inputs[1]) is None


def rewrite(node: gs.Node, ctx: Context) -> None:
    data, indices, updates = node.inputs
    reduction = str(node.attrs.get("reduction", "none"))
    dtype = tensor_dtype(data)
    check_reduction(reduction, dtype)
    if data.shape is None or indices.shape is None:
        raise Skip("input ranks are unknown (run shape inference upstream)")
    k = indices.shape[-1]
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise Skip("the last dim of indices is not static")
    k, q = int(k), len(indices.shape)
    b = ctx.builder
    dims = dims_of(b, data)
    rows = mul(b, *dims[:k])
    data2 = b.op("Flatten", [data], {"axis": k})  # [rows, S]
    upd2 = b.op("Flatten", [updates], {"axis": q - 1})  # [U, S]
    value = ctx.folder.value(indices) if isinstance(rows, int) and rows <= MAX_MAP_ENTRIES else None
    if value is not None:
        lin = numpy_linear(value, [int(d) for d in dims[:k]])  # type: ignore[arg-type]
        out = scatter_rows_constant(b, data2, upd2, lin, int(rows), reduction, dtype)  # type: ignore[arg-type]
    else:
        n_updates = mul(b, *dims_of(b, indices)[:-1])
        row_size = mul(b, *dims[k:])
        check_grid("data rows x updates" + (" x row size" if reduction != "none" else ""),
                   rows, n_updates, *((row_size,) if reduction != "none" else ()))
        flat_idx = b.op("Flatten", [indices], {"axis": q - 1})  # [U, k]
        lin_t = linear_index(b, flat_idx, dims[:k], known_nonnegative(indices, ctx.folder))
        out = scatter_rows_runtime(b, data2, upd2, lin_t, rows, n_updates, reduction, dtype)  # type: ignore[arg-type]
    replace_tensor(ctx.graph, node.outputs[0], restore_shape(b, out, data))


PASS = Pass(
    name="scatternd-decompose",
    order=14,
    summary="Rewrite ScatterND (any reduction) as Gathers over Concat(data, updates), or a one-hot grid for runtime indices.",
    ops=frozenset({"ScatterND"}),
    rules=(
        Rule(NO_IMPORTER, "<8.2-EA", "no ScatterND importer", error="scatternd-not-supported",
             evidence="operator table (ScatterND from 8.2-EA)"),
        Rule(WRONG_RESULTS, ">=8.2-EA,<10.0", "reduction with runtime indices silently ignored (plain overwrite)", _runtime_reduction,
             error="scatternd-reduction-attribute", evidence="importer source 8.2/8.6/9.3"),
        Rule(LIMIT, ">=10.0", "reduction with runtime indices rejected", _runtime_reduction, error="scatternd-reduction-attribute",
             evidence="importer source 10.1"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
