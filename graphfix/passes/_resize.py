"""What the Resize rewrites share (resize-cubic, resize-nearest-mode): the attributes, the
static plan of each resized axis (lengths, scales, roi) and input coordinates computed the way
onnxruntime computes them (what verification compares against). Here so that no pass module
imports another."""

from __future__ import annotations

import math

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph.build import Skip
from graphfix.graph.weights import optional_input
from graphfix.passes.base import Context

F32 = np.float32
MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
         "half_pixel_symmetric", "tf_crop_and_resize")


def attr(node: gs.Node, name: str, default: object) -> object:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


class Dynamic(Skip):
    """No static matrix: a resized axis' length or output size is known only at runtime."""


def coordinate(mode: str, x: int, scale: float, length_in: int, length_out: int, roi: tuple[float, float]) -> F32:
    """Input coordinate of output index ``x`` in float32, as onnxruntime computes it."""
    xf, s = F32(x), F32(scale)
    if mode == "half_pixel":
        return (xf + F32(0.5)) / s - F32(0.5)
    if mode == "pytorch_half_pixel":
        return (xf + F32(0.5)) / s - F32(0.5) if length_out > 1 else F32(0.0)
    if mode == "asymmetric":
        return xf / s
    if mode == "tf_half_pixel_for_nn":
        return (xf + F32(0.5)) / s
    if mode == "align_corners":
        return F32(0.0) if length_out == 1 else xf * F32(length_in - 1) / F32(length_out - 1)
    if mode == "half_pixel_symmetric":
        adjustment = F32(length_out) / (s * F32(length_in))
        center = F32(length_in) / F32(2.0)
        offset = center * (F32(1.0) - adjustment)
        return offset + ((xf + F32(0.5)) / s - F32(0.5))
    if mode == "tf_crop_and_resize":
        start, end = F32(roi[0]), F32(roi[1])
        if length_out > 1:
            return start * F32(length_in - 1) + (xf * (end - start) * F32(length_in - 1)) / F32(length_out - 1)
        return F32(0.5) * (start + end) * F32(length_in - 1)
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


class Plan:
    """Per resized axis: input/output length, scale and roi, every value static.

    ``axes`` lists only the axes that need a matrix; an axis with scale 1 (or a size taken from
    ``Shape(x)``, as the legacy exporter writes the batch/channel sizes) may keep a dynamic length.
    """

    def __init__(self, node: gs.Node, ctx: Context) -> None:
        x = node.inputs[0]
        if x.shape is None:
            raise Skip("input rank is unknown (run shape inference upstream)")
        rank = self.rank = len(x.shape)
        self.mode = str(attr(node, "coordinate_transformation_mode", "half_pixel"))
        if self.mode not in MODES:
            raise Skip(f"unknown coordinate_transformation_mode {self.mode!r}")
        given = attr(node, "axes", None)
        axes = list(range(rank)) if given is None else [int(a) % rank for a in given]  # type: ignore[attr-defined]
        if ctx.opset < 11:
            roi_t, scales_t, sizes_t = None, optional_input(node, 1), None
        else:
            roi_t, scales_t, sizes_t = optional_input(node, 1), optional_input(node, 2), optional_input(node, 3)
        dims = [int(d) if isinstance(d, (int, np.integer)) and d >= 0 else None for d in x.shape]
        sizes = sizes_of(ctx, sizes_t, x, axes) if sizes_t is not None else None
        if sizes is not None:
            out, scales = self._from_sizes(node, axes, sizes, dims)
        else:
            value = constant_of(ctx, scales_t, "scales")
            if value is None or value.size != len(axes):
                raise Skip(f"{0 if value is None else value.size} scales for {len(axes)} axes")
            scales = [F32(s) for s in value.reshape(-1)]
            out = [self._scaled(s, dims[k], k) for s, k in zip(scales, axes, strict=True)]
        self.identity = all(s == F32(1.0) for s in scales)  # onnxruntime copies then, whatever the mode
        self.length_in: dict[int, int] = {}
        self.length_out: dict[int, int] = {}
        self.scale: dict[int, F32] = {}
        for k, s, n_out in zip(axes, scales, out, strict=True):
            if s == F32(1.0):  # onnxruntime copies such an axis, whatever the mode (even a cropping roi)
                continue
            if dims[k] is None or n_out is None:
                raise Dynamic(dynamic(f"input axis {k} has a dynamic length ({x.shape[k]})"))
            self.length_in[k], self.length_out[k], self.scale[k] = dims[k], n_out, s  # type: ignore[assignment]
        self.axes = list(self.length_in)
        self.roi = {k: (0.0, 1.0) for k in axes}
        if self.mode == "tf_crop_and_resize":
            roi = constant_of(ctx, roi_t, "roi")
            if roi is None or roi.size != 2 * len(axes):
                raise Skip("tf_crop_and_resize needs a constant roi of 2 values per axis")
            flat = [float(v) for v in roi.reshape(-1)]
            self.roi = {k: (flat[i], flat[i + len(axes)]) for i, k in enumerate(axes)}

    @staticmethod
    def _scaled(s: F32, n: int | None, k: int) -> int | None:
        """floor(n * s) as onnxruntime computes it (float32 product, truncated)."""
        if s == F32(1.0):
            return n
        if n is None:
            raise Dynamic(dynamic(f"input axis {k} has a dynamic length"))
        size32 = int(F32(s) * F32(n))
        if size32 != math.floor(float(s) * n):
            raise Skip(f"output size is ambiguous (float32 {float(s)!r} * {n} = {size32}, exactly "
                       f"{math.floor(float(s) * n)}): export with sizes (F.interpolate(size=...))")
        return size32

    @staticmethod
    def _from_sizes(node: gs.Node, axes: list[int], sizes: list[int | None],
                    dims: list[int | None]) -> tuple[list[int | None], list[F32]]:
        """Output lengths and float32 scales; a size of None is "the input's own length"."""
        policy = str(attr(node, "keep_aspect_ratio_policy", "stretch"))
        out: list[int | None] = []
        scales: list[F32] = []
        for k, s in zip(axes, sizes, strict=True):
            n = dims[k]
            if s is None or (n is not None and s == n):
                out.append(n)
                scales.append(F32(1.0))
            elif n is None or n == 0:
                raise Dynamic(dynamic(f"input axis {k} has a dynamic length"))
            else:
                out.append(s)
                scales.append(F32(s) / F32(n))
        if policy == "stretch":
            return out, scales
        if any(dims[k] is None for k in axes):
            raise Dynamic(dynamic(f"keep_aspect_ratio_policy={policy} needs every input length"))
        scale = min(scales) if policy == "not_larger" else max(scales)
        return [int(math.floor(float(F32(scale * F32(dims[k]))) + 0.5)) for k in axes], [scale] * len(axes)


def dynamic(what: str) -> str:
    return (f"{what}; the interpolation matrices need static lengths: export at a fixed input size or pass "
            "--fix-shapes NAME:dims")


def constant_of(ctx: Context, t: gs.Tensor | None, what: str) -> np.ndarray | None:
    if t is None:
        return None
    v = ctx.folder.value(t)
    if v is None:
        raise Dynamic(dynamic(f"Resize {what} are computed at runtime (the output size depends on the input)"))
    v = np.asarray(v)
    return v if v.size else None


def sizes_of(ctx: Context, t: gs.Tensor, x: gs.Tensor, axes: list[int]) -> list[int | None] | None:
    """Constant sizes, with None where a size is read from ``Shape(x)`` at that same axis
    (``Concat(Shape(x)[0:2], size)``, what the legacy exporter writes for ``F.interpolate(size=)``)."""
    value = ctx.folder.value(t)
    if value is not None:
        value = np.asarray(value).reshape(-1)
        return None if value.size == 0 else [int(v) for v in value]
    entries = elements(ctx, t, x)
    if entries is None or None in entries:
        raise Dynamic(dynamic("Resize sizes are computed at runtime (the output size depends on the input)"))
    if len(entries) != len(axes):
        raise Skip(f"{len(entries)} sizes for {len(axes)} axes")
    out: list[int | None] = []
    for k, e in zip(axes, entries, strict=True):
        if isinstance(e, tuple) and e[1] != k:
            raise Dynamic(dynamic(f"the size of axis {k} is the runtime length of axis {e[1]}"))
        out.append(None if isinstance(e, tuple) else e)
    return out


def shape_axes(ctx: Context, t: gs.Tensor, x: gs.Tensor) -> list[int] | None:
    """The axes of ``x`` whose lengths ``Shape(x)`` sliced or gathered with constant indices reads, else None."""
    node = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
    if node is None or node.op not in ("Slice", "Gather") or not node.inputs[0].inputs:
        return None
    shape_node = node.inputs[0].inputs[0]
    if shape_node.op != "Shape" or shape_node.inputs[0] is not x or x.shape is None:
        return None
    rank = len(x.shape)
    indices = list(range(rank))[shape_node.attrs.get("start", 0):shape_node.attrs.get("end", None)]
    args = [ctx.folder.value(i) if i.name else None for i in node.inputs[1:]]
    if any(a is None for a, i in zip(args, node.inputs[1:], strict=True) if i.name):
        return None
    try:
        if node.op == "Gather":
            picked = np.asarray(indices)[np.asarray(args[0])].reshape(-1)
        else:
            starts, ends = (int(np.asarray(a).reshape(-1)[0]) for a in args[:2])
            steps = int(np.asarray(args[3]).reshape(-1)[0]) if len(args) > 3 and args[3] is not None else 1
            picked = np.asarray(indices[starts:ends:steps])
    except (IndexError, ValueError):
        return None
    return [int(i) for i in picked]


def elements(ctx: Context, t: gs.Tensor, x: gs.Tensor) -> list[object] | None:
    """Per element of a 1-D int tensor: its constant value, ``("shape", axis)`` for a length of
    ``x`` read through ``Shape``, or None (computed); None if a computed part's length is unknown."""
    node = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
    parts = node.inputs if node is not None and node.op == "Concat" else [t]
    out: list[object] = []
    for part in parts:
        v = ctx.folder.value(part)
        if v is not None:
            out.extend(int(i) for i in np.asarray(v).reshape(-1))
            continue
        picked = shape_axes(ctx, part, x)
        if picked is not None:
            out.extend(("shape", i) for i in picked)
            continue
        if part.shape is None or len(part.shape) != 1 or not isinstance(part.shape[0], (int, np.integer)):
            return None
        out.extend([None] * int(part.shape[0]))
    return out
