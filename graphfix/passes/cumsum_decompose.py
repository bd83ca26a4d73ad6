"""cumsum-decompose: CumSum as MatMul / Pad+Slice+Add, exact for integers.

Why: TensorRT parsers before 8.0 have no CumSum ("No importer registered for op: CumSum"); every
parser through 10.6 needs ``axis`` as an initializer; TensorRT >= 10.8 computes wrong results for
graphs with several CumSums or with ``reverse`` (NVIDIA/TensorRT#4551, #4513). Rewriting removes
the op, and with it all three problems.

How (the axis is first transposed to the end, and back afterwards, unless it is already last):

* float, static length n <= 64: one MatMul with an n x n triangular ones constant (the triangle
  encodes ``exclusive``/``reverse``).
* float, longer or dynamic length: blocked scan. Pad n to a multiple of 64, reshape to
  ``[..., n/64, 64]``, in-block cumsum by MatMul with a 64 x 64 triangle, block totals by
  ReduceSum, their exclusive cumsum (recursively the same lowering, so no constant ever exceeds
  64 x 64; a dynamic number of blocks uses the log-step scan), broadcast add, reshape, slice.
  The dynamic pad is ``(64 - n % 64) % 64`` on the non-negative length: integer Mod of
  non-negative operands, one meaning for truncating and flooring division (mod-decompose
  rewrites it where the target has no Mod).
* integers: log-step (Hillis-Steele) scan, ceil(log2 n) rounds of ``y += shift(y, 2^k)`` with the
  shift as constant-0 Pad + Slice on the last axis. Integer Add is exact (TensorRT's MatMul is
  float-only and float accumulation is not exact for large integers). A dynamic length gets
  ``log2(MAX_DYNAMIC_LENGTH)`` rounds: correct for lengths up to that bound.

Threshold measured with ``bench/cumsum_latency.py`` (onnxruntime CPU, 64 rows, fp32): a single
triangle MatMul costs 1.2x the native op at n=16 but 1.9x at 256 and 9.7x at 1024, while the
64-blocked form stays at 1.1x-1.5x from n=256 to n=16384; the log-step scan costs 2x-6.6x.

The SuperGlue ``arange_like`` idiom (cumsum of ``ConstantOfShape(1)``, usually ``- 1``) becomes a
``Range`` directly.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, is_weights, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._scan import MAX_DYNAMIC_LENGTH, along_last, constant_axis, log_scan, pad_last
from graphfix.passes.base import MUST_BE_WEIGHTS, NO_IMPORTER, TYPE, WRONG_RESULTS, Context, Pass, Rule

#: Static lengths up to this use one triangular MatMul; longer ones are blocked by this size.
BLOCK = 64


def _computed_axis(node: gs.Node, ctx: Context) -> bool:
    return not is_weights(node.inputs[1])


def _not_float(node: gs.Node, ctx: Context) -> bool:
    dtype = tensor_dtype(node.inputs[0])
    return dtype is None or dtype.kind != "f"


def rewrite(node: gs.Node, ctx: Context) -> None:
    x, y = node.inputs[0], node.outputs[0]
    axis, rank = constant_axis(node, ctx)
    exclusive, reverse = bool(node.attrs.get("exclusive", 0)), bool(node.attrs.get("reverse", 0))
    dtype = tensor_dtype(x)
    if dtype is None:
        raise Skip("input type is unknown (run shape inference upstream)")
    b = ctx.builder

    ranged = _arange_like(node, axis, exclusive, reverse, ctx)
    if ranged is not None:
        old, new = ranged
        replace_tensor(ctx.graph, old, new)
        return

    out = along_last(b, x, axis, rank, lambda moved, n: _cumsum_last(b, moved, rank, n, dtype, exclusive, reverse))
    replace_tensor(ctx.graph, y, out)


# ---------------------------------------------------------------- lowering
def _cumsum_last(b: Builder, x: gs.Tensor, rank: int, n: int | None, dtype: np.dtype, exclusive: bool, reverse: bool) -> gs.Tensor:
    """Cumulative sum along the last axis of ``x``."""
    if dtype.kind != "f":
        return log_scan(b, x, rank, n, exclusive, reverse)
    if n is not None and n <= BLOCK:
        return b.op("MatMul", [x, b.const(_triangle(n, exclusive, reverse, dtype), hint="triangle")])
    return _blocked(b, x, rank, n, dtype, exclusive, reverse)


def _triangle(n: int, exclusive: bool, reverse: bool, dtype: np.dtype) -> np.ndarray:
    """T with (x @ T)[j] = sum of x[i] over i <= j (forward) or i >= j (reverse); strict if exclusive."""
    i, j = np.indices((n, n))
    keep = (i > j if exclusive else i >= j) if reverse else (i < j if exclusive else i <= j)
    return keep.astype(dtype)


def _blocked(b: Builder, x: gs.Tensor, rank: int, n: int | None, dtype: np.dtype, exclusive: bool, reverse: bool) -> gs.Tensor:
    lead = [0] * (rank - 1)  # Reshape's 0 copies the leading dims, whatever they are at runtime
    if n is not None:
        pad = -n % BLOCK
        blocks: int | None = (n + pad) // BLOCK
        padded = pad_last(b, x, rank, 0, pad) if pad else x
    else:
        length = b.op("Gather", [b.shape(x), np.array([-1], np.int64)], {"axis": 0})
        pad = b.op("Mod", [b.op("Sub", [np.array([BLOCK], np.int64), b.op("Mod", [length, np.array([BLOCK], np.int64)])]), np.array([BLOCK], np.int64)])
        blocks = None
        padded = pad_last(b, x, rank, 0, pad)
    grid = b.reshape(padded, np.array([*lead, -1, BLOCK], np.int64))
    inner = b.op("MatMul", [grid, b.const(_triangle(BLOCK, exclusive, reverse, dtype), hint="triangle")])
    totals = b.reduce("ReduceSum", grid, [-1], keepdims=False)
    if blocks is not None:
        offsets = _cumsum_last(b, totals, rank, blocks, dtype, True, reverse)
    else:
        offsets = log_scan(b, totals, rank, None, True, reverse, MAX_DYNAMIC_LENGTH // BLOCK)
    summed = b.op("Add", [inner, b.unsqueeze(offsets, [-1])])
    flat = b.reshape(summed, np.array([*lead, -1], np.int64))
    if n is not None:
        return b.slice(flat, [0], [n], axes=[-1]) if pad else flat
    return b.slice(flat, np.array([0], np.int64), length, axes=[-1])


# ------------------------------------------------------------- arange_like
def _arange_like(node: gs.Node, axis: int, exclusive: bool, reverse: bool, ctx: Context) -> tuple[gs.Variable, gs.Tensor] | None:
    """cumsum(ConstantOfShape(n, 1)) [- 1]  ->  Range: SuperGlue's ``arange_like``."""
    x = node.inputs[0]
    producer = x.inputs[0] if x.inputs else None
    if producer is None or producer.op != "ConstantOfShape" or reverse or axis != 0 or len(x.shape or ()) != 1:
        return None
    fill = producer.attrs.get("value")
    if fill is None or np.asarray(fill.values).reshape(-1)[0] != 1:
        return None
    dtype = np.asarray(fill.values).dtype
    b = ctx.builder
    start = 0 if exclusive else 1
    out: gs.Variable = node.outputs[0]
    minus = _only_minus_one(out, ctx)
    if minus is not None:
        start, out = start - 1, minus.outputs[0]
    known = ctx.folder.value(producer.inputs[0])
    if known is not None:  # a static length: the values themselves
        return out, b.const(np.arange(start, start + int(known.reshape(-1)[0]), dtype=dtype), hint="arange")
    n = b.reshape(producer.inputs[0], np.array([], np.int64))
    if dtype != np.int64:
        n = b.cast(n, dtype)
    limit = b.op("Add", [n, np.array(start, dtype)])
    return out, b.op("Range", [np.array(start, dtype), limit, np.array(1, dtype)], dtype=dtype)


def _only_minus_one(t: gs.Variable, ctx: Context) -> gs.Node | None:
    if len(t.outputs) != 1 or t in ctx.graph.outputs:
        return None
    sub = t.outputs[0]
    if sub.op != "Sub" or sub.inputs[0] is not t:
        return None
    one = ctx.folder.value(sub.inputs[1])
    return sub if one is not None and one.size == 1 and one.reshape(-1)[0] == 1 else None


PASS = Pass(
    name="cumsum-decompose",
    summary="Rewrite CumSum into triangular MatMul / blocked MatMul / log-step Pad+Slice+Add (exact for ints).",
    ops=frozenset({"CumSum"}),
    rules=(
        Rule(NO_IMPORTER, "<8.0", "no CumSum importer", error="cumsum-not-supported", evidence="operator table"),
        Rule(MUST_BE_WEIGHTS, ">=8.0,<10.8", "axis must be an initializer", _computed_axis, error="cumsum-axis-not-initializer",
             evidence="operator table (8.0-10.6 restriction)"),
        Rule(TYPE, ">=8.0,<10.8", "CumSum on a non-float type (FP32/FP16 only)", _not_float, error="cumsum-not-supported",
             evidence="operator table types"),
        Rule(WRONG_RESULTS, ">=10.8", "wrong results with several CumSums or reverse", error="cumsum-not-supported",
             evidence="NVIDIA/TensorRT#4551, #4513"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
