"""scatterelements-decompose: ScatterElements as Gathers (constant indices) or a per-row one-hot grid.

Why: ``scatter_``, ``scatter_add_``, ``scatter_reduce`` and ``index_put_`` along one axis export to
ScatterElements, which TensorRT parsers before 8.2 do not import (plugin lookup fails). Parsers
8.2-9.3 import it but silently ignore ``reduction`` (add/mul, opset 16; max/min, opset 18): a
plain overwrite, wrong results (importer source 8.2/8.6/9.3). From 10.0 the reductions go through
a plugin and are accepted, so the pass leaves them alone there.

How:

* constant indices, static data shape: every element gets a constant flat source index, the
  output is ``Gather(Concat(flat data, flat updates), map)``; reductions gather each target's
  updates into a padded table and ReduceX it (see graphfix/passes/_indexing.py). Exact; the last
  duplicate wins for ``none``, as in onnxruntime.
* runtime indices: the axis is moved last; for every position of the other axes (the "row") a
  one-hot grid ``Equal(arange(D)[:, None], idx[..., None, :])`` of D x I (D = data's axis length,
  I = indices' axis length) — never (data size) x (indices size). ``none``: the last writer by
  ReduceMax of ``Cast(grid) * (t + 1)`` and one Gather; reductions: ``data op ReduceX(Where(grid,
  updates, neutral))`` (rows nobody writes reduce to the neutral element and keep their data bit
  for bit). Where the indices cover fewer rows than the data, the rest of the data is sliced off
  first and concatenated back.

Memory: the grid holds rows x D x I elements (BOOL, plus float32 for ``none`` or the Where'd
updates for reductions); above 2^25 with static shapes the node is reported, not rewritten.
Dynamic shapes are rewritten unbounded. Float add/mul with duplicate targets sum in a different
order than onnxruntime's sequential loop (last-bit differences). Cost: onnxruntime's native op
is O(updates); the grid is O(updates x D), so a reduction into many slots is slow on CPU
(``scatter_reduce`` amax of 512 edges x 64 features into 100 nodes: ~100x native), which is
the price of importing at all before 8.2 or of a right answer in 8.2-9.x.

Left out: ScatterElements on BOOL/INT8 data for >= 8.2 (a type issue, not a missing importer).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, static_shape
from graphfix.passes._indexing import (
    MAX_MAP_ENTRIES,
    Dim,
    as_int64,
    check_grid,
    dims_of,
    gather_written,
    known_nonnegative,
    last_writer,
    mul,
    normalized,
    one_hot,
    reduce_into,
    same_dim,
    scatter_operands,
    scatter_rows_constant,
    shape_tensor,
)
from graphfix.passes.base import NO_IMPORTER, WRONG_RESULTS, Context, Pass, Rule, Skip

_INT_MAX = np.iinfo(np.int64).max


def _reduction(node: gs.Node, ctx: Context) -> bool:
    return node.attrs.get("reduction", "none") != "none"


def rewrite(node: gs.Node, ctx: Context) -> None:
    data, indices, updates, reduction, dtype = scatter_operands(node)
    rank = len(data.shape)
    axis = int(node.attrs.get("axis", 0)) % rank
    b = ctx.builder
    shape = static_shape(data)
    value = ctx.folder.value(indices)
    if value is not None and shape is not None and int(np.prod(shape, dtype=np.int64)) <= MAX_MAP_ENTRIES:
        out = _constant(b, data, updates, np.asarray(value, np.int64), shape, axis, reduction, dtype)  # type: ignore[arg-type]
    else:
        out = _runtime(b, ctx, data, indices, updates, axis, reduction, dtype)  # type: ignore[arg-type]
    replace_tensor(ctx.graph, node.outputs[0], out)


def _constant(b: Builder, data: gs.Tensor, updates: gs.Tensor, idx: np.ndarray, shape: tuple[int, ...], axis: int,
              reduction: str, dtype: np.dtype) -> gs.Tensor:
    size = shape[axis]
    fixed = np.where(idx < 0, idx + size, idx)
    if np.any(fixed < 0) or np.any(fixed >= size):
        raise Skip("constant indices out of range (the original node fails at runtime too)")
    coords = np.indices(idx.shape, dtype=np.int64)
    coords[axis] = fixed
    lin = np.ravel_multi_index(tuple(coords.reshape(len(shape), -1)), shape).astype(np.int64)
    flat = np.array([-1], np.int64)
    total = int(np.prod(shape, dtype=np.int64))
    return scatter_rows_constant(b, b.reshape(data, flat), b.reshape(updates, flat), lin, total, reduction, dtype, shape)


def _runtime(b: Builder, ctx: Context, data: gs.Tensor, indices: gs.Tensor, updates: gs.Tensor, axis: int,
             reduction: str, dtype: np.dtype) -> gs.Tensor:
    rank = len(data.shape)
    perm = [j for j in range(rank) if j != axis] + [axis]
    moved = axis != rank - 1
    ddims, idims = dims_of(b, data), dims_of(b, indices)
    ddims, idims = [ddims[p] for p in perm], [idims[p] for p in perm]
    same = [same_dim(data.shape[p], indices.shape[p]) for p in perm[:-1]]
    check_grid("rows x data axis x indices axis", mul(b, *idims[:-1]), ddims[-1], idims[-1])
    nonneg = known_nonnegative(indices, ctx.folder)
    data_t, idx_t, upd_t = (b.transpose(t, perm) if moved else t for t in (data, as_int64(b, indices), updates))
    cut = [j for j, s in enumerate(same) if not s]  # axes where the indices cover fewer rows than the data
    sub = _slice(b, data_t, [0] * len(cut), [idims[j] for j in cut], cut) if cut else data_t
    grid = one_hot(b, normalized(b, idx_t, ddims[-1], nonneg), ddims[-1], idims[-1])  # [*rows, D, I]
    if reduction == "none":
        flat = np.array([-1], np.int64)
        last = last_writer(b, grid, idims[-1])
        out = gather_written(b, b.reshape(sub, flat), b.reshape(upd_t, flat), last, ddims[-1], idims[-1], batch=idims[:-1])
    else:
        out = reduce_into(b, sub, grid, b.unsqueeze(upd_t, [-2]), reduction, dtype)
    for n in reversed(range(len(cut))):  # put back the data rows no index reaches, last axis first
        earlier, j = cut[:n], cut[n]
        rest = _slice(b, data_t, [0] * n + [idims[j]], [idims[e] for e in earlier] + [_INT_MAX], [*earlier, j])
        out = b.concat([out, rest], j)
    return b.transpose(out, list(np.argsort(perm))) if moved else out


def _slice(b: Builder, x: gs.Tensor, starts: list[Dim], ends: list[Dim], axes: list[int]) -> gs.Tensor:
    return b.slice(x, shape_tensor(b, starts), shape_tensor(b, ends), axes=axes)


PASS = Pass(
    name="scatterelements-decompose",
    order=15,
    summary="Rewrite ScatterElements (any reduction) as Gathers over Concat(data, updates), or a per-row one-hot grid.",
    ops=frozenset({"ScatterElements"}),
    rules=(
        Rule(NO_IMPORTER, "<8.2-EA", "no ScatterElements importer (the generic plugin-fallback error)",
             evidence="operator table (ScatterElements from 8.2-EA)"),
        Rule(WRONG_RESULTS, ">=8.2-EA,<10.0", "reduction attribute silently ignored (plain overwrite)", _reduction,
             evidence="importer source 8.2/8.6/9.3 (no error: a wrong result)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
