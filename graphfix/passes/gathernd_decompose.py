"""gathernd-decompose: GatherND as a linear index and one Gather on a flattened view.

Why: TensorRT parsers before 8.2 have no GatherND importer ("No importer registered for op:
GatherND"). The dynamo exporter writes boolean masking ``x[mask]`` in transformers models as
``NonZero -> Transpose -> GatherND``; TF-converted models use ``batch_dims``.

How: for ``GatherND(data, indices[..., k], batch_dims=b)`` the k index columns (Gather per
column, negative entries + dim as GatherND defines) become one row-major linear index into the
``data.shape[b:b+k]`` block, plus ``batch * block`` for the b batch dims; ``data`` is reshaped
to ``[-1, *data.shape[b+k:]]`` and a single Gather on axis 0 produces exactly GatherND's output
shape ``indices.shape[:-1] + data.shape[b+k:]`` and dtype. Integer Mul/Add only (no ReduceSum
over integers, float-only before TensorRT 9; no MatMul). Static dims fold to constants, dynamic
ones come from Shape. Indices known to be non-negative (constants, NonZero/ArgMax/Shape outputs
moved by Transpose/Reshape/...) skip the negative-index Where. Constant indices with static
dims become one constant Gather table.

Considered and left out: GatherElements (has an importer from 8.0) and TensorRT's BOOL type
restriction on the Gather this writes (bool-gather-cast, later in the pipeline, casts it for
< 8.5). The indices' last dim must be static (it fixes the output rank anyway).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._indexing import (
    Dim,
    arange,
    dim_tensor,
    dims_of,
    known_nonnegative,
    linear_index,
    mul,
    numpy_linear,
    shape_tensor,
)
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule


def rewrite(node: gs.Node, ctx: Context) -> None:
    data, indices = node.inputs[0], node.inputs[1]
    bd = int(node.attrs.get("batch_dims", 0))
    if indices.shape is None or data.shape is None:
        raise Skip("input ranks are unknown (run shape inference upstream)")
    k = indices.shape[-1]
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise Skip("the last dim of indices is not static (it fixes the output rank)")
    k, q = int(k), len(indices.shape)
    b = ctx.builder
    dims = dims_of(b, data)
    sizes, trailing = dims[bd : bd + k], dims[bd + k :]
    lin = _constant_linear(ctx, indices, dims, bd, k) if all(isinstance(d, int) for d in dims[: bd + k]) else None
    if lin is None:
        lin = linear_index(b, indices, sizes, known_nonnegative(indices, ctx.folder))
        if bd:
            lin = b.op("Add", [lin, _batch_offset(b, indices, dims[:bd], mul(b, *sizes), q - 1 - bd)], dtype=np.int64)
    flat = b.reshape(data, shape_tensor(b, [-1, *trailing]))
    replace_tensor(ctx.graph, node.outputs[0], b.op("Gather", [flat, lin], {"axis": 0}))


def _constant_linear(ctx: Context, indices: gs.Tensor, dims: list[Dim], bd: int, k: int) -> gs.Tensor | None:
    """Constant indices: the whole linear index table, computed now."""
    value = ctx.folder.value(indices)
    if value is None:
        return None
    value = np.asarray(value, np.int64)
    lead = [int(d) for d in dims[:bd]]  # type: ignore[arg-type]
    block = [int(d) for d in dims[bd : bd + k]]  # type: ignore[arg-type]
    n_batch = int(np.prod(lead, dtype=np.int64))
    rows = numpy_linear(value, block).reshape(n_batch, -1)
    rows += (np.arange(n_batch, dtype=np.int64) * int(np.prod(block, dtype=np.int64)))[:, None]
    return ctx.builder.const(rows.reshape(value.shape[:-1]), hint="linear_index")


def _batch_offset(b: Builder, indices: gs.Tensor, batch: list[Dim], block: Dim, inner: int) -> gs.Tensor:
    """``arange(prod(batch)) * block`` shaped ``[*batch, 1 x inner]`` to broadcast over the linear index."""
    if all(isinstance(d, int) for d in batch) and isinstance(block, int):
        n = int(np.prod(batch, dtype=np.int64))
        return b.const((np.arange(n, dtype=np.int64) * block).reshape(*batch, *([1] * inner)), hint="batch_offset")
    first = b.op("Mul", [arange(b, mul(b, *batch)), dim_tensor(b, block)], dtype=np.int64)
    return b.reshape(first, shape_tensor(b, [*batch, *([1] * inner)]))


PASS = Pass(
    name="gathernd-decompose",
    summary="Rewrite GatherND (any batch_dims) as a linear index and one Gather on a flattened view.",
    ops=frozenset({"GatherND"}),
    rules=(
        Rule(NO_IMPORTER, "<8.2-EA", "no GatherND importer (the generic plugin-fallback error)",
             evidence="operator table (GatherND from 8.2-EA)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
