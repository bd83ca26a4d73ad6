"""Shared lowering of GatherND / ScatterND / ScatterElements into ops every TensorRT parser imports.

Used by gathernd-decompose, scatternd-decompose and scatterelements-decompose (a private module:
the registry skips names starting with ``_``). Everything here is built from Shape, Gather, Slice,
Concat, Reshape, Flatten, Unsqueeze, Range, Cast, Add/Sub/Mul, Less/Greater/Equal, Where and
ReduceSum/Prod/Max/Min: all imported by TensorRT 7.0 onwards (Range and Where from 7.0).

Dimensions are ``Dim``: a Python int when the export knows it, else a 0-d INT64 tensor computed
from ``Shape`` at runtime, so one code path serves static and dynamic shapes and folds to
constants wherever it can.

Two scatter kernels, both exact (results are copied or reduced, never recomputed):

* **constant indices** (known when the pass runs, static shapes): a constant source map; the
  output is ``Gather(Concat(data rows, new rows), map)``. Duplicates: the last write wins for
  ``reduction='none'`` (what onnxruntime does, in index order); reductions combine each target's
  updates with one padded ``Gather`` + ``ReduceX`` (pad = the reduction's neutral element, or for
  max/min the group's own first update).
* **runtime indices**: a one-hot grid ``Equal(arange(rows)[:, None], lin[None, :])`` of
  ``rows x updates`` booleans. ``none``: the last writer per row is ``ReduceMax`` of
  ``Cast(grid) * (update_number + 1)`` (float32, exact below 2^24 updates), and one ``Gather``
  picks each output row from the data or from that update. When the rows factor into hi x lo
  (ScatterND with k >= 2), duplicates are dropped first and a MatMul of two small one-hots gives
  the writers without the rows x updates grid. Reductions: ``data op ReduceX(
  Where(grid, update, neutral))`` over the updates axis, ``rows x row_size x updates`` elements;
  rows nobody writes reduce to the neutral element, which leaves the data bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.fold import Folder
from graphfix.graph import Builder, static_shape, tensor_dtype
from graphfix.graph.build import Skip

Dim = int | gs.Tensor
#: A runtime one-hot grid (rows x updates [x row size]) larger than this many elements is a finding.
MAX_GRID_ELEMENTS = 1 << 25
#: A constant source map larger than this many entries falls back to the runtime kernel.
MAX_MAP_ENTRIES = 1 << 22
#: Update numbers are compared as float32 (ReduceMax is float-only before TensorRT 9): exact below this.
MAX_UPDATES = 1 << 24
#: The factored (MatMul) last-writer form is used up to this many updates (exact in TF32/FP16 MatMuls).
MAX_FACTORED_UPDATES = 2048
#: (elementwise op, reduce op) per ONNX ``reduction``.
REDUCE = {"add": ("Add", "ReduceSum"), "mul": ("Mul", "ReduceProd"), "max": ("Max", "ReduceMax"), "min": ("Min", "ReduceMin")}
_INT_MAX = np.iinfo(np.int64).max
#: Ops whose integer outputs are never negative, and ops that pass such values through unchanged.
_NONNEG_SOURCES = {"NonZero", "ArgMax", "ArgMin", "Shape", "Size"}
_NONNEG_THROUGH = {"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Cast", "Expand", "Slice", "Gather", "Tile"}


# ------------------------------------------------------------------ dims
def dims_of(b: Builder, x: gs.Tensor) -> list[Dim]:
    """Every dim of ``x``: the static ones as ints, the rest as 0-d tensors from Shape(x)."""
    if x.shape is None:
        raise Skip(f"the rank of {x.name} is unknown (run shape inference upstream)")
    out: list[Dim] = []
    for j, d in enumerate(x.shape):
        if isinstance(d, (int, np.integer)) and d >= 0:
            out.append(int(d))
        else:
            out.append(b.op("Gather", [b.shape(x), np.array(j, np.int64)], {"axis": 0}, dtype=np.int64, shape=[]))
    return out


def dim_tensor(b: Builder, d: Dim) -> gs.Tensor:
    return b.const(np.array(d, np.int64)) if isinstance(d, int) else d


def mul(b: Builder, *ds: Dim) -> Dim:
    known = int(np.prod([d for d in ds if isinstance(d, int)], dtype=np.int64))
    out: Dim = known
    for d in ds:
        if not isinstance(d, int):
            out = d if isinstance(out, int) and out == 1 else b.op("Mul", [dim_tensor(b, out), d], dtype=np.int64, shape=[])
    return out


def same_dim(a: object, c: object) -> bool:
    """Two shape entries known to be equal (equal ints, or the same symbolic name)."""
    if isinstance(a, (int, np.integer)) and isinstance(c, (int, np.integer)):
        return int(a) == int(c) and int(a) >= 0
    return isinstance(a, str) and a == c


def shape_tensor(b: Builder, ds: Sequence[Dim]) -> gs.Tensor:
    """A 1-D INT64 shape from dims (a constant when they are all static)."""
    if all(isinstance(d, int) for d in ds):
        return b.const(np.array(list(ds), np.int64), hint="shape")
    parts = [b.unsqueeze(d, [0]) if not isinstance(d, int) else np.array([d], np.int64) for d in ds]
    return b.concat(parts, 0)


def arange(b: Builder, n: Dim, dtype: type = np.int64) -> gs.Tensor:
    """0..n-1 as a 1-D tensor (a constant for a static n, else an INT64 Range)."""
    if isinstance(n, int):
        return b.const(np.arange(n, dtype=dtype), hint="arange")
    r = b.op("Range", [np.array(0, np.int64), n, np.array(1, np.int64)], dtype=np.int64, shape=[None])
    return r if np.dtype(dtype) == np.int64 else b.cast(r, dtype)


# --------------------------------------------------------------- indices
def known_nonnegative(t: gs.Tensor, folder: Folder, depth: int = 8) -> bool:
    """The integer values of ``t`` are provably >= 0 (NonZero/ArgMax/Shape outputs, moved around)."""
    value = folder.value(t)
    if value is not None:
        return bool(np.all(np.asarray(value) >= 0))
    producer = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
    if producer is None or depth == 0:
        return False
    if producer.op in _NONNEG_SOURCES or (producer.op == "TopK" and t is producer.outputs[1]):
        return True
    if producer.op in _NONNEG_THROUGH:
        return known_nonnegative(producer.inputs[0], folder, depth - 1)
    if producer.op == "Concat":
        return all(known_nonnegative(i, folder, depth - 1) for i in producer.inputs)
    return False


def normalized(b: Builder, col: gs.Tensor, size: Dim, nonneg: bool) -> gs.Tensor:
    """Negative indices count from the end (idx + size where idx < 0), as the Gather/Scatter ops define."""
    if nonneg:
        return col
    zero = np.array(0, np.int64)
    return b.op("Where", [b.op("Less", [col, zero], dtype=np.bool_), b.op("Add", [col, dim_tensor(b, size)], dtype=np.int64), col],
                dtype=np.int64)


def linear_index(b: Builder, idx: gs.Tensor, sizes: Sequence[Dim], nonneg: bool, first: int = 0) -> gs.Tensor:
    """Columns ``first..first+len(sizes)-1`` of ``idx[..., k]`` -> row-major linear index ``[...]``
    into a block of ``sizes``.

    One Gather per column and integer Mul/Add: exact, and no ReduceSum over integers (float-only in
    TensorRT < 9).
    """
    lin: gs.Tensor | None = None
    stride: Dim = 1
    for j in reversed(range(len(sizes))):
        col = b.op("Gather", [idx, np.array(first + j, np.int64)], {"axis": -1}, dtype=np.int64)
        col = normalized(b, col, sizes[j], nonneg)
        term = col if isinstance(stride, int) and stride == 1 else b.op("Mul", [col, dim_tensor(b, stride)], dtype=np.int64)
        lin = term if lin is None else b.op("Add", [term, lin], dtype=np.int64)
        stride = mul(b, stride, sizes[j])
    assert lin is not None
    return lin


def as_int64(b: Builder, t: gs.Tensor) -> gs.Tensor:
    return t if tensor_dtype(t) == np.int64 else b.cast(t, np.int64)


def numpy_linear(idx: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Constant ``idx[..., k]`` -> flat linear indices (negatives normalized); Skip when out of range."""
    idx = np.asarray(idx, np.int64).reshape(-1, len(sizes))
    size = np.asarray(sizes, np.int64)
    fixed = np.where(idx < 0, idx + size, idx)
    if np.any(fixed < 0) or np.any(fixed >= size):
        raise Skip("constant indices out of range (the original node fails at runtime too)")
    return np.ravel_multi_index(fixed.T, tuple(sizes)).astype(np.int64) if len(sizes) else np.zeros(len(idx), np.int64)


# ----------------------------------------------------------------- reductions
def neutral(reduction: str, dtype: np.dtype) -> np.ndarray:
    """The element a reduction leaves unchanged, bit for bit: -0.0 (x + -0.0 is x, even for x = -0.0;
    0 for integers), 1, the type's lowest / highest value (-inf / inf for floats)."""
    if reduction == "add":
        return np.array(-0.0 if dtype.kind == "f" else 0, dtype)
    if reduction == "mul":
        return np.array(1, dtype)
    if dtype.kind == "f":
        return np.array(-np.inf if reduction == "max" else np.inf, dtype)
    info = np.iinfo(dtype)
    return np.array(info.min if reduction == "max" else info.max, dtype)


def scatter_operands(node: gs.Node) -> tuple[gs.Tensor, gs.Tensor, gs.Tensor, str, np.dtype | None]:
    """(data, indices, updates, reduction, data type) of a ScatterND/ScatterElements node, or Skip
    when graphfix does not rewrite it (an unknown reduction, a reduction on non-numbers, unknown ranks)."""
    data, indices, updates = node.inputs
    reduction = str(node.attrs.get("reduction", "none"))
    dtype = tensor_dtype(data)
    if reduction != "none" and reduction not in REDUCE:
        raise Skip(f"reduction={reduction!r} is not one graphfix knows")
    if reduction != "none" and (dtype is None or dtype.kind not in "fiu"):
        raise Skip(f"reduction={reduction!r} on {dtype} data is not rewritten (numbers only)")
    if data.shape is None or indices.shape is None:
        raise Skip("input ranks are unknown (run shape inference upstream)")
    return data, indices, updates, reduction, dtype


# ------------------------------------------------------------ constant kernel
def scatter_rows_constant(
    b: Builder, data_rows: gs.Tensor, upd_rows: gs.Tensor, lin: np.ndarray, rows: int, reduction: str, dtype: np.dtype,
    out_index_shape: Sequence[int],
) -> gs.Tensor:
    """``data_rows[rows, ...]`` with ``upd_rows[U, ...]`` written to constant rows ``lin[U]``: Gathers only.

    The final Gather's constant index table has ``out_index_shape`` (prod = rows), so its output
    already has the data's shape.
    """
    source = np.arange(rows, dtype=np.int64)
    if reduction == "none":
        source[lin] = rows + np.arange(len(lin))  # fancy assignment keeps the last duplicate: last write wins
        return _gather(b, b.concat([data_rows, upd_rows], 0), source.reshape(out_index_shape))
    targets, inverse, counts = np.unique(lin, return_inverse=True, return_counts=True)
    width = int(counts.max(initial=0))
    if width <= 1:
        reduced = _gather(b, upd_rows, np.argsort(inverse.reshape(-1), kind="stable"))
    else:
        reduced = _reduced_groups(b, upd_rows, inverse.reshape(-1), len(targets), width, reduction, dtype)
    new_rows = b.op(REDUCE[reduction][0], [_gather(b, data_rows, targets), reduced])
    source[targets] = rows + np.arange(len(targets))
    return _gather(b, b.concat([data_rows, new_rows], 0), source.reshape(out_index_shape))


def _reduced_groups(
    b: Builder, upd_rows: gs.Tensor, inverse: np.ndarray, n_targets: int, width: int, reduction: str, dtype: np.dtype
) -> gs.Tensor:
    """Per target row, ReduceX over its updates (a [T, width] index table, padded)."""
    groups: list[list[int]] = [[] for _ in range(n_targets)]
    for u, g in enumerate(inverse.tolist()):
        groups[g].append(u)
    if reduction in ("max", "min"):  # idempotent: pad with the group's own first update
        table = np.array([g + [g[0]] * (width - len(g)) for g in groups], np.int64)
        source = upd_rows
    else:  # add/mul: pad with a row of the neutral element
        pad = len(inverse)
        table = np.array([g + [pad] * (width - len(g)) for g in groups], np.int64)
        one_row = b.concat([np.array([1], np.int64), b.slice(b.shape(upd_rows), [1], [_INT_MAX], axes=[0])], 0)
        source = b.concat([upd_rows, b.op("Expand", [b.const(neutral(reduction, dtype)), one_row])], 0)
    return b.reduce(REDUCE[reduction][1], _gather(b, source, table), [1], keepdims=False)


def _gather(b: Builder, x: gs.Tensor, rows: np.ndarray) -> gs.Tensor:
    """Rows of ``x`` by a constant table (INT32 when it fits: half the bytes, same result)."""
    table = np.asarray(rows)
    table = table.astype(np.int32) if table.size and table.max(initial=0) < np.iinfo(np.int32).max else table.astype(np.int64)
    return b.op("Gather", [x, b.const(table, hint="rows")], {"axis": 0})


# ------------------------------------------------------------- runtime kernel
def check_grid(what: str, *sizes: Dim) -> None:
    """Skip when a statically known grid would exceed MAX_GRID_ELEMENTS."""
    if all(isinstance(s, int) for s in sizes):
        total = int(np.prod([int(s) for s in sizes], dtype=np.float64))
        if total > MAX_GRID_ELEMENTS:
            raise Skip(f"runtime indices: the one-hot grid ({what}) would hold {total} elements, above the limit of "
                       f"{MAX_GRID_ELEMENTS} (2^25); left as is")


def one_hot(b: Builder, lin: gs.Tensor, rows: Dim, updates: Dim) -> gs.Tensor:
    """``grid[..., r, u] = lin[..., u] == r``: BOOL ``[..., rows, U]``."""
    if isinstance(updates, int) and updates >= MAX_UPDATES:
        raise Skip(f"{updates} updates: the float32 update numbers would not be exact (limit 2^24)")
    return b.op("Equal", [b.unsqueeze(arange(b, rows), [-1]), b.unsqueeze(lin, [-2])], dtype=np.bool_)


def update_numbers(b: Builder, updates: Dim) -> gs.Tensor:
    """1..U as float32 (ReduceMax is float-only before TensorRT 9; exact below 2^24)."""
    if isinstance(updates, int):
        return b.const(np.arange(1, updates + 1, dtype=np.float32), hint="update_number")
    return b.op("Add", [arange(b, updates, np.float32), np.array(1, np.float32)], dtype=np.float32)


def last_writer(b: Builder, grid: gs.Tensor, updates: Dim) -> gs.Tensor:
    """``[*batch, rows]`` float: 1 + the last update written to each row, 0 for none.

    ReduceMax of ``Cast(grid) * (u + 1)``: the numbers are finite, so the product is exact (and a
    broadcasting Where costs 3x more in onnxruntime).
    """
    weighted = b.op("Mul", [b.cast(grid, np.float32), update_numbers(b, updates)], dtype=np.float32)
    return b.reduce("ReduceMax", weighted, [-1], keepdims=False)


def last_writer_factored(b: Builder, hi: gs.Tensor, lo: gs.Tensor, n_hi: int, n_lo: int, updates: int) -> gs.Tensor:
    """:func:`last_writer` for a row index ``hi * n_lo + lo`` without the ``rows x U`` grid.

    Earlier duplicates are dropped first (a ``U x U`` grid: is there a later update to the same
    row?); with one writer per row left, ``MatMul(onehot(hi) * (u + 1), onehot(lo)^T)`` adds one
    number and zeros per cell: ``n_hi x U + U x n_lo + U x U`` elements instead of
    ``n_hi x n_lo x U``. Exact while u + 1 <= 2048 even under TF32/FP16 MatMul (11-bit significand).
    """
    number = update_numbers(b, updates)
    lin = b.op("Add", [b.op("Mul", [hi, np.array(n_lo, np.int64)], dtype=np.int64), lo], dtype=np.int64)
    later = last_writer(b, b.op("Equal", [b.unsqueeze(lin, [-1]), b.unsqueeze(lin, [0])], dtype=np.bool_), updates)
    kept = b.op("Mul", [b.cast(b.op("Equal", [later, number], dtype=np.bool_), np.float32), number], dtype=np.float32)
    rows_hi = b.op("Mul", [b.cast(one_hot(b, hi, n_hi, updates), np.float32), kept], dtype=np.float32)  # [n_hi, U]
    rows_lo = b.cast(b.op("Equal", [b.unsqueeze(lo, [-1]), arange(b, n_lo)], dtype=np.bool_), np.float32)  # [U, n_lo]
    return b.reshape(b.op("MatMul", [rows_hi, rows_lo], dtype=np.float32), np.array([-1], np.int64))


def gather_written(
    b: Builder, data_rows: gs.Tensor, upd_rows: gs.Tensor, last: gs.Tensor, rows: Dim, updates: Dim,
    batch: Sequence[Dim] = (), index_shape: gs.Tensor | None = None,
) -> gs.Tensor:
    """Each row from the data or from its last writer (``last`` from :func:`last_writer`), one Gather.

    ``data_rows`` / ``upd_rows`` hold the batch-major rows (``[batch*rows, ...]`` /
    ``[batch*U, ...]``); the source index is reshaped to ``index_shape`` when given, so the Gather
    writes the data's shape directly.
    """
    hit = b.op("Greater", [last, np.array(0, np.float32)], dtype=np.bool_)
    writer = b.cast(last, np.int64)
    own = arange(b, rows)
    n_batch = mul(b, *batch)
    if batch:
        first = b.reshape(arange(b, n_batch), shape_tensor(b, [*batch, 1]))  # [*batch, 1]
        own = b.op("Add", [b.op("Mul", [first, dim_tensor(b, rows)], dtype=np.int64), own], dtype=np.int64)
        writer = b.op("Add", [b.op("Mul", [first, dim_tensor(b, updates)], dtype=np.int64), writer], dtype=np.int64)
    offset = mul(b, n_batch, rows)  # update rows follow the data rows; the writer is 1-based
    shift = offset - 1 if isinstance(offset, int) else b.op("Sub", [offset, np.array(1, np.int64)], dtype=np.int64)
    source = b.op("Where", [hit, b.op("Add", [writer, dim_tensor(b, shift)], dtype=np.int64), own], dtype=np.int64)
    if index_shape is not None:
        source = b.reshape(source, index_shape)
    return b.op("Gather", [b.concat([data_rows, upd_rows], 0), source], {"axis": 0})


def reduce_into(b: Builder, data: gs.Tensor, grid: gs.Tensor, upd: gs.Tensor, reduction: str, dtype: np.dtype) -> gs.Tensor:
    """``data op ReduceX(Where(grid, upd, neutral))`` over the last axis (the updates).

    ``grid`` and ``upd`` broadcast to ``[..., U]`` with ``...`` = ``data``'s shape. Rows no update
    reaches reduce to the neutral element, and ``data op neutral`` is ``data`` bit for bit.
    """
    op, reduce_op = REDUCE[reduction]
    values = b.op("Where", [grid, upd, b.const(neutral(reduction, dtype))])
    return b.op(op, [data, b.reduce(reduce_op, values, [-1], keepdims=False)])


def restore_shape(b: Builder, out: gs.Tensor, like: gs.Tensor) -> gs.Tensor:
    """Reshape ``out`` to ``like``'s shape (a constant shape when static)."""
    shape = static_shape(like)
    return b.reshape(out, np.array(shape, np.int64) if shape is not None else b.shape(like))
