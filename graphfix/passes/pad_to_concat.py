"""pad-to-concat: Pad as Slice / Concat / Expand, one axis at a time.

Why: TensorRT 5.1-6.0 pads only with constant zeros; 7.x only zeros on the last two axes ("This
version of TensorRT only supports constant 0 padding!", "only supports padding on the outer two
dimensions"); 8.0 needs pads and constant_value as initializers and at most two padded axes;
8.2-9.x take N-D constant/reflect/edge but not ``wrap`` (10.0+) nor the opset-18 ``axes`` input
(rejected 8.6-9.3, initializer-only 10.0-10.3). Slice, Concat and Expand are accepted everywhere.

Rewrite, per padded axis (padding is separable, so axis by axis equals N-D padding, corners
included): negative pads crop with Slice; positive pads Concat blocks before/after the tensor:
``constant`` a block of the value (an initializer when the other dims are static, else Expand of
the value to a Shape-derived size), ``edge`` the first/last slice Expanded, ``reflect`` a Slice
with step -1 (TensorRT's Slice takes negative steps since 7.0), ``wrap`` the opposite end.

Pads that fold to constants (initializers, Constant nodes, Shape arithmetic on static dims) give
constant blocks; pads computed from dynamic dims at runtime (Swin/SAM window padding, pad to a
multiple of 8) give the same blocks sized by shape tensors, which 7.x/8.0 accept for Slice
bounds and Expand shapes (importer source 7.2.1/8.0-GA importSlice: only the axes must be
known); ``wrap`` by runtime amounts is reported.
With a target version only the Pads it rejects are rewritten; zero constant padding of the last
two axes is accepted by every parser and left alone unless the pass is forced.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, is_weights, optional_input, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import LIMIT, MUST_BE_WEIGHTS, Context, Pass, Rule

_INT_MAX = np.iinfo(np.int64).max


def _optional(node: gs.Node, k: int) -> gs.Tensor | None:
    return optional_input(node, k)


def _spec(node: gs.Node, ctx: Context) -> tuple[str, np.ndarray | None, np.ndarray | None, list[int] | None]:
    """(mode, pads as [begins..., ends...] or None if runtime, value or None, axes)."""
    mode = node.attrs.get("mode", "constant")
    rank = len(node.inputs[0].shape) if node.inputs[0].shape is not None else None
    if ctx.opset < 11:
        return mode, np.asarray(node.attrs["pads"], np.int64), np.asarray(node.attrs.get("value", 0.0)), list(range(rank or 0))
    pads = ctx.folder.value(node.inputs[1])
    value_t = _optional(node, 2)
    value = np.zeros((), tensor_dtype(node.inputs[0]) or np.float32) if value_t is None else ctx.folder.value(value_t)
    axes_t = _optional(node, 3)
    if axes_t is None:
        axes = list(range(rank)) if rank is not None else None
    else:
        folded = ctx.folder.value(axes_t)
        axes = None if folded is None or rank is None else [int(a) % rank for a in folded.reshape(-1)]
    return mode, None if pads is None else pads.astype(np.int64).reshape(-1), value, axes


def _has_axes(node: gs.Node, ctx: Context) -> bool:
    return ctx.opset >= 18 and _optional(node, 3) is not None


def _wrap(node: gs.Node, ctx: Context) -> bool:
    return node.attrs.get("mode", "constant") == "wrap"


def _computed_axes(node: gs.Node, ctx: Context) -> bool:
    return _has_axes(node, ctx) and not is_weights(_optional(node, 3))


def _not_zero_constant(node: gs.Node, ctx: Context) -> bool:
    mode, _, value, _ = _spec(node, ctx)
    return mode != "constant" or value is None or bool(np.any(value != 0))


def _computed_pads(node: gs.Node, ctx: Context) -> bool:
    return ctx.opset >= 11 and not (is_weights(node.inputs[1]) and is_weights(_optional(node, 2)))


def _malformed(pads: np.ndarray, axes: list[int]) -> str | None:
    """Pads that are not one begin and one end per axis (onnxruntime refuses the node too)."""
    if pads.size == 2 * len(axes):
        return None
    return f"pads hold {pads.size} value(s), the padded axes need {2 * len(axes)}"


def _outer_or_negative(node: gs.Node, ctx: Context) -> bool:
    """Padding of an axis before the last two, negative pads, or pads/rank not known."""
    _, pads, _, axes = _spec(node, ctx)
    rank = len(node.inputs[0].shape) if node.inputs[0].shape is not None else None
    if pads is None or axes is None or rank is None or _malformed(pads, axes):
        return True
    n = len(axes)
    padded = {axes[k] for k in range(n) if pads[k] != 0 or pads[n + k] != 0}
    return any(a < rank - 2 for a in padded) or bool(np.any(pads < 0))


def rewrite(node: gs.Node, ctx: Context) -> None:
    mode, pads, value, axes = _spec(node, ctx)
    x = node.inputs[0]
    if axes is None:
        raise Skip("input rank or axes unknown (run shape inference upstream)")
    if pads is None:
        return _runtime_pads(node, ctx, mode, axes, value)
    malformed = _malformed(pads, axes)
    if malformed:
        raise Skip(malformed)
    if value is None:
        value_tensor: gs.Tensor | None = node.inputs[2]
    else:
        value_tensor = None
    dtype = tensor_dtype(x)
    if dtype is None:
        raise Skip("input type unknown (run shape inference upstream)")
    b = ctx.builder
    shape = list(x.shape)
    n = len(axes)
    y: gs.Tensor = x
    for k, axis in enumerate(axes):
        begin, end = int(pads[k]), int(pads[n + k])
        if begin == 0 and end == 0:
            continue
        size = shape[axis] if isinstance(shape[axis], int) and shape[axis] >= 0 else None
        if begin < 0 or end < 0:
            y = b.slice(y, [max(0, -begin)], [end if end < 0 else _INT_MAX], axes=[axis])
            if size is not None:
                size -= max(0, -begin) + max(0, -end)
            shape[axis] = size if size is not None else -1
            begin, end = max(begin, 0), max(end, 0)
        if mode in ("reflect", "wrap") and size is not None and max(begin, end) > size - (mode == "reflect"):
            raise Skip(f"{mode} padding of {max(begin, end)} exceeds what axis {axis} (size {size}) allows")
        parts = []
        if begin:
            parts.append(_block(b, y, shape, axis, begin, True, mode, value, value_tensor, dtype))
        parts.append(y)
        if end:
            parts.append(_block(b, y, shape, axis, end, False, mode, value, value_tensor, dtype))
        if len(parts) > 1:
            y = b.concat(parts, axis)
        shape[axis] = size + begin + end if size is not None else -1
    replace_tensor(ctx.graph, node.outputs[0], y)


def _runtime_pads(node: gs.Node, ctx: Context, mode: str, axes: list[int], value: np.ndarray | None) -> None:
    """Pads computed at runtime (Swin's window padding, pad-to-multiple-of-8, cumsum-decompose's
    blocks), for the releases that want them as weights: per axis, negative pads crop with a Slice
    whose bounds are shape tensors, positive ones Concat a block sized by a shape tensor (a zero
    size when the pad is 0: TensorRT supports empty tensors), exactly like the static form."""
    if mode == "wrap":
        raise Skip("wrap padding by amounts computed at runtime has no form in the ops every release takes")
    x, b = node.inputs[0], ctx.builder
    dtype = tensor_dtype(x)
    if dtype is None or x.shape is None:
        raise Skip("input type or rank unknown (run shape inference upstream)")
    pads = node.inputs[1] if tensor_dtype(node.inputs[1]) == np.int64 else b.cast(node.inputs[1], np.int64)
    fill = None
    if mode == "constant":  # the folded constant_value (0 when absent), else the runtime scalar
        fill = node.inputs[2] if value is None else b.const(np.asarray(value.reshape(-1)[0] if value.size else 0, dtype), hint="fill")
    zero = b.const(np.array([0], np.int64), hint="zero")
    n, y = len(axes), x
    for k, axis in enumerate(axes):
        begin, end = (b.slice(pads, [j], [j + 1], axes=[0]) for j in (k, n + k))
        size = b.slice(b.shape(y), [axis], [axis + 1], axes=[0])
        crop_end = b.max(b.op("Sub", [zero, end]), zero)
        y = b.op("Slice", [y, b.max(b.op("Sub", [zero, begin]), zero), b.op("Sub", [size, crop_end]),
                           b.const(np.array([axis], np.int64), hint="axis")], dtype=dtype)
        rank = len(x.shape)
        parts = [_runtime_block(b, y, rank, axis, b.max(begin, zero), True, mode, fill), y,
                 _runtime_block(b, y, rank, axis, b.max(end, zero), False, mode, fill)]
        y = b.concat(parts, axis)
    replace_tensor(ctx.graph, node.outputs[0], y)


def _runtime_block(b: Builder, y: gs.Tensor, rank: int, axis: int, p: gs.Tensor, before: bool, mode: str,
                   fill: gs.Tensor | None) -> gs.Tensor:
    """The ``p`` (a [1] shape tensor) slices padding adds on one side of ``axis``."""
    if mode == "reflect":  # a forward Slice of p elements next to the border, reversed: p = 0 gives an empty block
        one, ax = b.const(np.array([1], np.int64)), b.const(np.array([axis], np.int64))
        if before:
            near = b.op("Slice", [y, one, b.op("Add", [one, p]), ax])
        else:
            last = b.op("Sub", [b.slice(b.shape(y), [axis], [axis + 1], axes=[0]), one])
            near = b.op("Slice", [y, b.op("Sub", [last, p]), last, ax])
        return b.op("Slice", [near, b.const(np.array([-1], np.int64)), b.const(np.array([np.iinfo(np.int64).min], np.int64)),
                              ax, b.const(np.array([-1], np.int64))])
    shape = b.shape(y)
    pieces = []
    if axis > 0:
        pieces.append(b.slice(shape, [0], [axis], axes=[0]))
    pieces.append(p)
    if axis < rank - 1:
        pieces.append(b.slice(shape, [axis + 1], [_INT_MAX], axes=[0]))
    target = b.concat(pieces, 0)
    if mode == "edge":
        edge = b.slice(y, [0], [1], axes=[axis]) if before else b.slice(y, [-1], [_INT_MAX], axes=[axis])
        return b.op("Expand", [edge, target])
    return b.op("Expand", [fill, target])


def _block(b: Builder, y: gs.Tensor, shape: list, axis: int, p: int, before: bool, mode: str,
           value: np.ndarray | None, value_tensor: gs.Tensor | None, dtype: np.dtype) -> gs.Tensor:
    """The p slices that padding adds on one side of ``axis``."""
    if mode == "reflect":
        return b.slice(y, [p], [0], axes=[axis], steps=[-1]) if before else b.slice(y, [-2], [-2 - p], axes=[axis], steps=[-1])
    if mode == "wrap":
        return b.slice(y, [-p], [_INT_MAX], axes=[axis]) if before else b.slice(y, [0], [p], axes=[axis])
    target = list(shape)
    target[axis] = p
    if mode == "edge":
        edge = b.slice(y, [0], [1], axes=[axis]) if before else b.slice(y, [-1], [_INT_MAX], axes=[axis])
        return b.op("Expand", [edge, _shape_of(b, y, target, axis, p)])
    static = all(isinstance(d, int) and d >= 0 for d in target)
    if value is not None and static:
        return b.const(np.full(target, value.reshape(-1)[0] if value.size else 0, dtype=dtype), hint="pad_block")
    fill = b.const(np.asarray(value.reshape(-1)[0], dtype)) if value is not None else value_tensor
    return b.op("Expand", [fill, _shape_of(b, y, target, axis, p)])


def _shape_of(b: Builder, y: gs.Tensor, target: list, axis: int, p: int) -> gs.Tensor:
    """y's shape with ``axis`` set to p: a constant when static, else Shape arithmetic."""
    if all(isinstance(d, int) and d >= 0 for d in target):
        return b.const(np.array(target, np.int64), hint="shape")
    rank = len(target)
    pieces = []
    if axis > 0:
        pieces.append(b.slice(b.shape(y), [0], [axis], axes=[0]))
    pieces.append(b.const(np.array([p], np.int64)))
    if axis < rank - 1:
        pieces.append(b.slice(b.shape(y), [axis + 1], [_INT_MAX], axes=[0]))
    return b.concat(pieces, 0)


PASS = Pass(
    name="pad-to-concat",
    summary="Rewrite Pad (non-zero value, reflect/edge/wrap, N-D, negative, axes input) into Slice/Concat/Expand.",
    ops=frozenset({"Pad"}),
    rules=(
        Rule(LIMIT, "<8.2", "Pad other than constant zeros", _not_zero_constant, error="pad-non-zero-or-non-constant-mode",
             evidence="importer source (7.x/8.0: constant 0 only)"),
        Rule(MUST_BE_WEIGHTS, "<8.2", "pads/constant_value must be initializers", _computed_pads, error="pad-pads-not-initializer",
             evidence="importer source 8.0"),
        Rule(LIMIT, "<8.2", "padding of an axis before the last two, or negative pads", _outer_or_negative,
             error="pad-non-spatial-axes", evidence="importer source 7.x/8.0"),
        Rule(LIMIT, "<10.0", "mode 'wrap' (opset 19)", _wrap, error="pad-non-zero-or-non-constant-mode", evidence="operator table (wrap from 10.0)"),
        Rule(LIMIT, "<10.0", "the opset-18 axes input", _has_axes, error="pad-non-zero-or-non-constant-mode",
             evidence="importer source (rejected 8.6-9.3)"),
        Rule(MUST_BE_WEIGHTS, "<10.4", "the axes input must be an initializer", _computed_axes, error="pad-pads-not-initializer",
             evidence="operator table 10.0-10.3"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    forced=lambda node, ctx: True,  # --force rewrites every Pad, zero padding of the last two axes too
)
