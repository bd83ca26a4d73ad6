"""What cumsum-decompose and cumprod-decompose share: the constant axis, moving it last and back,
and the log-step (Hillis-Steele) scan with its shift as constant-0 Pad + Slice. Here so that no
pass module imports another."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder
from graphfix.graph.build import Skip
from graphfix.passes.base import Context

#: A dynamic-length integer scan is exact for lengths up to this.
MAX_DYNAMIC_LENGTH = 1 << 20
_INT_MAX = np.iinfo(np.int64).max


def constant_axis(node: gs.Node, ctx: Context) -> tuple[int, int]:
    """(axis, rank) of a CumSum/CumProd node, the axis a constant made non-negative, or Skip."""
    x = node.inputs[0]
    axis_value = ctx.folder.value(node.inputs[1])
    if axis_value is None:
        raise Skip("axis is computed at runtime; TensorRT needs it as a constant (use a constant dim in the export)")
    if x.shape is None:
        raise Skip("input rank is unknown (run shape inference upstream)")
    rank = len(x.shape)
    axis = int(np.asarray(axis_value).reshape(-1)[0])
    return (axis + rank if axis < 0 else axis), rank


def along_last(b: Builder, x: gs.Tensor, axis: int, rank: int, scan: Callable[[gs.Tensor, int | None], gs.Tensor]) -> gs.Tensor:
    """``scan(moved, length)`` on ``x`` with ``axis`` transposed to the end (and back), unless it is last."""
    perm = list(range(rank))
    perm.append(perm.pop(axis))
    moved = x if axis == rank - 1 else b.transpose(x, perm)
    length = x.shape[axis] if isinstance(x.shape[axis], int) and x.shape[axis] >= 0 else None
    out = scan(moved, length)
    return out if axis == rank - 1 else b.transpose(out, list(np.argsort(perm)))


def log_scan(
    b: Builder, x: gs.Tensor, rank: int, n: int | None, exclusive: bool, reverse: bool, bound: int = MAX_DYNAMIC_LENGTH,
    combine: str = "Add", fill: np.ndarray | None = None,
) -> gs.Tensor:
    """Log-step inclusive scan with ``combine`` (Add; Mul for cumprod-decompose, whose shifts are
    filled with ``fill``, its neutral element), then one extra shift for ``exclusive``; a dynamic
    ``n`` <= ``bound``."""
    rounds = math.ceil(math.log2(n if n is not None else bound)) if (n or bound) > 1 else 0
    y = x
    for k in (1 << r for r in range(rounds)):
        y = b.op(combine, [y, _shift(b, y, rank, k, reverse, n, fill)])
    return _shift(b, y, rank, 1, reverse, n, fill) if exclusive else y


def _shift(b: Builder, y: gs.Tensor, rank: int, k: int, reverse: bool, n: int | None = None,
           fill: np.ndarray | None = None) -> gs.Tensor:
    """y moved k places along the last axis (towards the end, or the start if reverse), zero-filled
    (or ``fill``-filled: Where over a position mask, since Pad with a non-zero value is refused
    before TensorRT 8.2; ``n`` is the axis length if static)."""
    if reverse:
        moved = b.slice(pad_last(b, y, rank, 0, k), [k], [_INT_MAX], axes=[-1])
    else:
        moved = b.slice(pad_last(b, y, rank, k, 0), [0], [-k], axes=[-1])
    if fill is None:
        return moved
    if n is not None:
        pos = np.arange(n)
        vacated: gs.Tensor = b.const(pos >= n - k if reverse else pos < k, hint="vacated")
    else:
        length = b.op("Gather", [b.shape(y), np.array(-1, np.int64)], {"axis": 0})
        pos_t = b.op("Range", [np.array(0, np.int64), length, np.array(1, np.int64)])
        edge = b.op("Sub", [length, np.array(k, np.int64)]) if reverse else np.array(k, np.int64)
        before = b.op("Less", [pos_t, edge])
        vacated = b.op("Not", [before]) if reverse else before
    return b.op("Where", [vacated, b.const(fill, hint="fill"), moved])


def pad_last(b: Builder, x: gs.Tensor, rank: int, front: int | gs.Tensor, back: int | gs.Tensor) -> gs.Tensor:
    """Constant-0 Pad of the last axis (the one axis every TensorRT Pad importer accepts)."""
    if isinstance(front, int) and isinstance(back, int):
        pads = np.zeros(2 * rank, np.int64)
        pads[rank - 1], pads[2 * rank - 1] = front, back
        if b.opset < 11:
            return b.op("Pad", [x], {"pads": pads.tolist(), "mode": "constant"})
        return b.op("Pad", [x, pads])
    zeros = np.zeros(rank - 1, np.int64)
    parts = [zeros, _as_1d(b, front), zeros, _as_1d(b, back)]
    return b.op("Pad", [x, b.concat(parts, 0)])


def _as_1d(b: Builder, v: int | gs.Tensor) -> gs.Tensor:
    return b.const(np.array([v], np.int64)) if isinstance(v, int) else v
