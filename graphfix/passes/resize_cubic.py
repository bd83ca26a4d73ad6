"""resize-cubic: Resize ``mode=cubic`` as per-axis interpolation matrices (MatMul).

Why: parsers before 8.5 reject every cubic Resize. ``importResize`` in onnx-tensorrt 7.0-GA
through 8.4-GA (builtin_op_importers.cpp) asserts ``mode != "cubic" && "This version of TensorRT
does not support cubic interpolation!"`` (errors.json ``resize-cubic``); 8.5-GA maps it onto
``ResizeMode::kCUBIC``. Who exports it: ViT position-embedding interpolation (DINOv2, Depth
Anything, YOLOS, ViTMatte: ``F.interpolate(pos_embed, size=..., mode="bicubic",
align_corners=False)``); the legacy exporter writes Resize with constant ``scales`` or ``sizes``
(often computed from ``Shape``), ``cubic_coeff_a=-0.75``, ``pytorch_half_pixel``/``half_pixel``
or ``align_corners``.

How: cubic resizing is separable and linear in the data, so with a static output size each
resized axis k is one constant matrix ``A_k [out_k, in_k]`` and ``Y = A_h · X · A_w^T``:
the last axis is ``MatMul(Y, A^T)``, the second-to-last ``MatMul(A, Y)`` (broadcast over the
leading axes), any other axis is swapped to the end by a Transpose and back. Each row of ``A_k``
holds the four Keys weights (``cubic_coeff_a``) of one output coordinate, computed the way
onnxruntime (what verification compares against) does:

* coordinates in float32 with onnxruntime's operation order for every
  ``coordinate_transformation_mode`` (half_pixel, pytorch_half_pixel, align_corners,
  asymmetric, tf_half_pixel_for_nn, half_pixel_symmetric, tf_crop_and_resize with a constant roi);
* taps outside ``[0, in-1]`` are clamped to the border (edge replication), or with
  ``exclude_outside=1`` get weight 0 and the rest are renormalised;
* tf_crop_and_resize: output points whose coordinate falls outside the input get
  ``extrapolation_value`` (a zero matrix row, plus a constant Add when the value is not 0);
* output sizes: ``sizes`` as given (opset-18 ``keep_aspect_ratio_policy`` applied), or
  ``floor(in * scale)`` as a float32 product (onnxruntime); scale = float32 ``out / in`` for sizes;
  opset-18 ``axes`` selects the axes the scales/sizes/roi describe;
* an axis whose scale is 1 is copied by onnxruntime whatever the mode (tf_half_pixel_for_nn's
  half-pixel shift and tf_crop_and_resize's roi are not applied there, unlike the ONNX reference),
  so it gets no MatMul; a Resize with every scale 1 becomes an Identity;
* align_corners uses the integer output length (onnxruntime), not ``in * scale`` (the ONNX
  reference, which differs when a scale does not divide evenly: node case
  ``test_resize_downsample_scales_cubic_align_corners``);
* ``antialias=1`` (opset 18): a downscale stretches the kernel by in/out and normalises the
  weights by their sum, in float32 as onnxruntime's Pillow-derived filter setup does.

The weights are computed in float64 and stored in the data type (float32/float64; float16 data
goes through float32 MatMuls and back), so results equal onnxruntime's to float rounding: the
MatMul sums the same four products in another order. MatMul, Transpose, Add and Cast are imported
by every release >= 7.0. Non-finite data: a zero weight times inf/NaN is NaN, so an inf/NaN
pixel spreads along its whole row/column, where Resize only spreads it over 4 taps.

Runtime output size (DINOv2 at a dynamic image size: ``sizes`` computed from the image's H/W) or
runtime input length: per resized axis a 4-tap Gather form (Range of output indices, the same
coordinates, Floor + Keys weights, clamped taps gathered along the axis, Mul + ReduceSum). Output
lengths must be integer shape arithmetic: ``sizes``, or integer constant scales (n·s), since the
8.0-8.2 parsers cannot compute shape tensors with Unary layers such as Floor
(parser_support.json ``shape_tensor_producers_parser_8_0_to_8_2``).

Left as findings (what to change is in the message): runtime lengths with a fractional or runtime
scale (export with ``size=``), or with tf_crop_and_resize / tf_half_pixel_for_nn /
half_pixel_symmetric / antialias / keep_aspect_ratio_policy (export at a fixed size or
``--fix-shapes``), non-float data, a float32 output size that is ambiguous (the
float32 and exact products differ). Not a rule here: 8.5+ imports cubic only over the innermost
two axes when scales are weights ("only supports cubic resizing on the outermost 2 dimensions").
"""

from __future__ import annotations

import math

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.graph.weights import optional_input
from graphfix.passes._resize import F32, Dynamic, Plan, attr, coordinate, elements
from graphfix.passes.base import LIMIT, Context, Pass, Rule

#: Tap offsets around floor(coordinate).
TAPS = (-1, 0, 1, 2)


def _is_cubic(node: gs.Node, ctx: Context) -> bool:
    return attr(node, "mode", "nearest") == "cubic"


# ------------------------------------------------------------------ weights (numpy, onnxruntime's float32 order)


def _keys(d: float, a: float) -> float:
    """Keys' cubic convolution kernel with coefficient ``a``."""
    d = abs(d)
    if d <= 1.0:
        return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    if d < 2.0:
        return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    return 0.0


def axis_matrix(length_in: int, length_out: int, scale: float, mode: str, a: float, exclude_outside: bool,
                roi: tuple[float, float] = (0.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
    """``(A [out, in] float64, outside [out] bool)``: cubic weights per output index; ``outside``
    marks tf_crop_and_resize points that take ``extrapolation_value`` (their row is zero)."""
    matrix = np.zeros((length_out, length_in))
    outside = np.zeros(length_out, bool)
    for o in range(length_out):
        c = coordinate(mode, o, scale, length_in, length_out, roi)
        if mode == "tf_crop_and_resize" and (c < 0 or c > length_in - 1):
            outside[o] = True
            continue
        base = math.floor(float(c))
        frac = float(c) - base
        taps = [base + t for t in TAPS]
        weights = [_keys(frac - t, a) for t in TAPS]
        if exclude_outside:
            weights = [w if 0 <= t < length_in else 0.0 for w, t in zip(weights, taps, strict=True)]
            total = sum(weights)
            weights = [w / total for w in weights]
        for w, t in zip(weights, taps, strict=True):
            matrix[o, min(max(t, 0), length_in - 1)] += w
    return matrix, outside


def _keys32(d: F32, a: F32) -> F32:
    """onnxruntime's float32 antialias cubic filter (Pillow's form of Keys' kernel)."""
    d = abs(d)
    if d < F32(1.0):
        return ((a + F32(2.0)) * d - (a + F32(3.0))) * d * d + F32(1.0)
    if d < F32(2.0):
        return (((d - F32(5.0)) * d + F32(8.0)) * d - F32(4.0)) * a
    return F32(0.0)


def antialias_matrix(length_in: int, length_out: int, scale: float, mode: str, a: float, exclude_outside: bool,
                     roi: tuple[float, float] = (0.0, 1.0)) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`axis_matrix` for ``antialias=1``: downscaling stretches the kernel by in/out
    (support 2·in/out taps each side), upscaling is plain cubic; weights normalised by their
    sum, out-of-range taps clamped to the border (or dropped with ``exclude_outside``), all in
    float32 in onnxruntime's order (its Pillow-derived ``SetupUpsampleFilterAntiAlias``)."""
    matrix = np.zeros((length_out, length_in))
    outside = np.zeros(length_out, bool)
    rscale = F32(scale)
    inverse = F32(1.0) / rscale
    support = F32(2.0) * inverse if inverse >= F32(1.0) else F32(2.0)
    window = math.ceil(float(support)) * 2 + 1
    shrink = F32(1.0) / inverse if inverse >= F32(1.0) else F32(1.0)
    a32 = F32(a)
    for o in range(length_out):
        c = F32(o) if inverse == F32(1.0) else coordinate(mode, o, float(rscale), length_in, length_out, roi)
        center = F32(0.5) + c
        if mode == "tf_crop_and_resize" and (center - F32(0.5) < 0 or center - F32(0.5) > F32(length_in - 1)):
            outside[o] = True
            continue
        lo = int(math.floor(center - support + F32(0.5)))
        hi = int(math.floor(center + support + F32(0.5)))
        hi = lo + min(max(hi - lo, 0), window)
        if min(max(lo, 0), length_in) >= min(max(hi, 0), length_in):
            continue  # no tap inside the input: onnxruntime writes 0 here
        taps = [t for t in range(lo, hi) if not exclude_outside or 0 <= t < length_in]
        weights = [_keys32((F32(t) - center + F32(0.5)) * shrink, a32) for t in taps]
        total = F32(0.0)
        for w in weights:
            total = total + w
        norm = F32(1.0) if total == F32(0.0) else F32(1.0) / total
        for t, w in zip(taps, weights, strict=True):
            matrix[o, min(max(t, 0), length_in - 1)] += float(w)
        matrix[o] = (matrix[o].astype(F32) * norm).astype(np.float64)
    return matrix, outside


# ------------------------------------------------------------------ reading the node


# ------------------------------------------------------------------ rewrite
def rewrite(node: gs.Node, ctx: Context) -> None:
    x, y = node.inputs[0], node.outputs[0]
    dtype = tensor_dtype(x)
    if dtype is None or dtype not in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)):
        raise Skip(f"data type {dtype} is not float32/float64/float16 (integer cubic Resize rounds and saturates)")
    try:
        plan = Plan(node, ctx)
    except Dynamic as why:
        _runtime_rewrite(node, ctx, dtype, str(why))
        return
    b = ctx.builder
    if plan.identity:
        replace_tensor(ctx.graph, y, b.op("Identity", [x]))  # onnxruntime copies when every scale is 1
        return
    ct = np.dtype(np.float64) if dtype == np.float64 else np.dtype(F32)
    cur: gs.Tensor = x if dtype == ct else b.cast(x, ct)
    rank = plan.rank
    fill = None
    value = float(attr(node, "extrapolation_value", 0.0))  # type: ignore[arg-type]
    a = float(attr(node, "cubic_coeff_a", -0.75))  # type: ignore[arg-type]
    exclude = bool(int(attr(node, "exclude_outside", 0)))  # type: ignore[call-overload]
    antialias = bool(int(attr(node, "antialias", 0)))  # type: ignore[call-overload]
    # Most-shrinking axis first: later MatMuls then work on fewer elements.
    for k in sorted(plan.axes, key=lambda k: plan.length_out[k] / max(plan.length_in[k], 1)):
        n_in, n_out = plan.length_in[k], plan.length_out[k]
        build = antialias_matrix if antialias else axis_matrix
        matrix, outside = build(n_in, n_out, plan.scale[k], plan.mode, a, exclude, plan.roi[k])
        if outside.any():
            shape = [1] * rank
            shape[k] = n_out
            mask = outside.reshape(shape)
            fill = mask if fill is None else (fill | mask)
        if n_in == n_out and np.array_equal(matrix, np.eye(n_in)):
            continue
        cur = _apply(b, cur, matrix.astype(ct), k, rank)
    if fill is not None and value != 0.0:
        cur = b.op("Add", [cur, b.const(np.where(fill, value, 0.0).astype(ct), hint="extrapolation")])
    if cur is x:
        cur = b.op("Identity", [x])
    replace_tensor(ctx.graph, y, cur if dtype == ct else b.cast(cur, dtype))


def _apply(b: Builder, x: gs.Tensor, matrix: np.ndarray, k: int, rank: int) -> gs.Tensor:
    """Contract axis ``k`` of ``x`` with ``matrix [out, in]``."""
    if k == rank - 2:
        return b.op("MatMul", [b.const(matrix, hint="rows"), x])
    if k == rank - 1:
        return b.op("MatMul", [x, b.const(np.ascontiguousarray(matrix.T), hint="cols")])
    perm = list(range(rank))
    perm[k], perm[-1] = perm[-1], perm[k]
    moved = b.op("MatMul", [b.transpose(x, perm), b.const(np.ascontiguousarray(matrix.T), hint="cols")])
    return b.transpose(moved, perm)


# ------------------------------------------------------------------ runtime sizes: 4-tap Gather form
#: Modes the runtime form computes (tf_half_pixel_for_nn and tf_crop_and_resize are copied, not
#: shifted, by onnxruntime at scale 1, which a runtime scale cannot tell apart).
RUNTIME_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _runtime_rewrite(node: gs.Node, ctx: Context, dtype: np.dtype, why: str) -> None:
    """Per resized axis, at runtime: output coordinates from Range, floor + Keys weights of 4
    taps, a Gather of the clamped taps along the axis, Mul and ReduceSum. Output sizes must come
    from ``sizes`` (``F.interpolate(size=...)``) or integer constant scales (``scale_factor=2``),
    so the output length is integer shape arithmetic (8.0-8.2 compute no shape tensor with Floor)."""
    x = node.inputs[0]
    mode = str(attr(node, "coordinate_transformation_mode", "half_pixel"))
    rank = len(x.shape)
    policy = str(attr(node, "keep_aspect_ratio_policy", "stretch"))
    if mode not in RUNTIME_MODES or int(attr(node, "antialias", 0)) or policy != "stretch":  # type: ignore[call-overload]
        raise Skip(f"{why} (no runtime form for {mode}, antialias or keep_aspect_ratio_policy)")
    given = attr(node, "axes", None)
    axes = list(range(rank)) if given is None else [int(a) % rank for a in given]  # type: ignore[attr-defined]
    scales_t, sizes_t = optional_input(node, 2), optional_input(node, 3)
    sizes_value = ctx.folder.value(sizes_t) if sizes_t is not None else None
    b = ctx.builder
    dims = [int(d) if isinstance(d, (int, np.integer)) and d >= 0 else None for d in x.shape]
    work: list[tuple[int, gs.Tensor, gs.Tensor, gs.Tensor]] = []  # (axis, n_in [1] i64, n_out [1] i64, scale [1] f32)
    if sizes_t is not None and (sizes_value is None or np.asarray(sizes_value).size):
        entries = elements(ctx, sizes_t, x)
        entries = entries if entries is not None and len(entries) == len(axes) else None
        for i, k in enumerate(axes):
            e = entries[i] if entries is not None else None
            if e == ("shape", k) or (isinstance(e, int) and e == dims[k]):
                continue
            n_in = _length(b, x, k, dims[k])
            n_out = b.const(np.array([e], np.int64)) if isinstance(e, int) else b.slice(sizes_t, [i], [i + 1])
            scale = b.op("Div", [b.cast(n_out, F32), b.cast(n_in, F32)])
            work.append((k, n_in, n_out, scale))
    else:
        value = ctx.folder.value(scales_t) if scales_t is not None else None
        if value is None:
            raise Skip(f"{why} (runtime scales: export with size= so the output size is integer arithmetic)")
        for s, k in zip(np.asarray(value, F32).reshape(-1), axes, strict=True):
            if s == F32(1.0):
                continue
            if s != np.floor(s) or s < 1:
                raise Skip(f"{why} (a non-integer scale {float(s)} on a runtime length: export with size=)")
            n_in = _length(b, x, k, dims[k])
            work.append((k, n_in, b.op("Mul", [n_in, b.const(np.array([int(s)], np.int64))]), b.const(np.array([s], F32))))
    ct = np.dtype(np.float64) if dtype == np.float64 else np.dtype(F32)
    cur: gs.Tensor = x if dtype == ct else b.cast(x, ct)
    a = float(attr(node, "cubic_coeff_a", -0.75))  # type: ignore[arg-type]
    exclude = bool(int(attr(node, "exclude_outside", 0)))  # type: ignore[call-overload]
    for k, n_in, n_out, scale in work:
        cur = _gather_axis(b, cur, k, rank, n_in, n_out, scale, mode, a, exclude, ct)
    if cur is x:
        cur = b.op("Identity", [x])
    replace_tensor(ctx.graph, node.outputs[0], cur if dtype == ct else b.cast(cur, dtype))


def _length(b: Builder, x: gs.Tensor, k: int, static: int | None) -> gs.Tensor:
    return b.const(np.array([static], np.int64)) if static is not None else b.slice(b.shape(x), [k], [k + 1])


def _gather_axis(b: Builder, x: gs.Tensor, k: int, rank: int, n_in: gs.Tensor, n_out: gs.Tensor, scale: gs.Tensor,
                 mode: str, a: float, exclude: bool, ct: np.dtype) -> gs.Tensor:
    """Resize axis ``k`` of ``x`` from n_in to n_out: [n_out, 4] taps and weights, one Gather."""
    def c(v: object) -> gs.Constant:
        return b.const(np.asarray(v, F32))

    count = b.reshape(n_out, np.array([], np.int64))
    o = b.unsqueeze(b.cast(b.op("Range", [np.array(0, np.int64), count, np.array(1, np.int64)], dtype=np.int64), F32), [1])
    n_in_f = b.cast(n_in, F32)
    if mode == "align_corners":  # x * (in - 1) / (out - 1); out = 1 reads coordinate 0
        den = b.op("Max", [b.op("Sub", [b.cast(n_out, F32), c(1.0)]), c(1.0)])
        coord = b.op("Div", [b.op("Mul", [o, b.op("Sub", [n_in_f, c(1.0)])]), den])
    elif mode == "asymmetric":
        coord = b.op("Div", [o, scale])
    else:
        coord = b.op("Sub", [b.op("Div", [b.op("Add", [o, c(0.5)]), scale]), c(0.5)])
        if mode == "pytorch_half_pixel":  # out = 1 reads coordinate 0
            coord = b.op("Mul", [coord, b.cast(b.op("Greater", [n_out, np.array([1], np.int64)]), F32)])
    base = b.op("Floor", [coord])
    offsets = c(np.reshape(TAPS, (1, 4)))
    d = b.op("Abs", [b.op("Sub", [b.op("Sub", [coord, base]), offsets])])  # [n_out, 4]
    near = b.op("Add", [b.op("Mul", [b.op("Mul", [b.op("Sub", [b.op("Mul", [d, c(a + 2)]), c(a + 3)]), d]), d]), c(1.0)])
    far = b.op("Mul", [b.op("Sub", [b.op("Mul", [d, c(a)]), c(5 * a)]), d])
    far = b.op("Sub", [b.op("Mul", [b.op("Add", [far, c(8 * a)]), d]), c(4 * a)])
    weights = b.op("Add", [b.op("Mul", [near, c([[0, 1, 1, 0]])]), b.op("Mul", [far, c([[1, 0, 0, 1]])])])
    taps = b.op("Add", [base, offsets])
    index = b.op("Min", [b.op("Max", [taps, c(0.0)]), b.op("Sub", [n_in_f, c(1.0)])])
    if exclude:  # taps outside the input weigh 0, the rest are renormalised
        weights = b.op("Mul", [weights, b.cast(b.op("Equal", [index, taps]), F32)])
        weights = b.op("Div", [weights, b.reduce("ReduceSum", weights, [1], keepdims=True)])
    picked = b.op("Gather", [x, b.cast(index, np.int32)], {"axis": k})  # axis k -> [n_out, 4]
    if ct != F32:
        weights = b.cast(weights, ct)
    trailing = rank - 1 - k
    if trailing:
        weights = b.unsqueeze(weights, list(range(2, 2 + trailing)))
    return b.reduce("ReduceSum", b.op("Mul", [picked, weights]), [k + 1], keepdims=False)


PASS = Pass(
    name="resize-cubic",
    summary="Rewrite cubic Resize (rejected before 8.5) as interpolation-matrix MatMuls (static size) or a 4-tap Gather (runtime size).",
    ops=frozenset({"Resize"}),
    rules=(
        Rule(LIMIT, ">=7.0,<8.5", "Resize mode 'cubic' is not supported", _is_cubic, error="resize-cubic",
             evidence="importer source: onnx-tensorrt builtin_op_importers.cpp importResize, 7.0-GA..8.4-GA "
                      "ASSERT(mode != \"cubic\"); kCUBIC from 8.5-GA"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
