"""resize-nearest-mode: a nearest Resize whose coordinate/rounding combination the parser
refuses, as the same Resize in an accepted combination, or as constant-index Gathers.

Why: the importers of 8.0-GA ... 8.6-GA and 9.0-GA (``builtin_op_importers.cpp`` ``importResize``)
and 10.0-GA, 10.1-GA and main (``onnxOpCheckers.cpp``) assert ``transformationMode !=
"tf_half_pixel_for_nn" || nearest_mode == "round_prefer_floor"`` ("This version of TensorRT only
support round_prefer_floor nearest mode in tf_half_pixel_for_nn!"); 9.1-9.3 dropped the check
and round half down there, other pixels than onnxruntime's (wrong results). tf2onnx writes exactly that for ``tf.image.resize(method="nearest")`` and
Keras ``UpSampling2D``/``Resizing(interpolation="nearest")`` with half-pixel centers:
``coordinate_transformation_mode=tf_half_pixel_for_nn, nearest_mode=floor`` (fixtures/real
tf2onnx_resize_nearest_op13/op17).

How, for ``nearest_mode=floor`` (what tf2onnx writes): the same Resize with
``coordinate_transformation_mode=half_pixel, nearest_mode=round_prefer_ceil``, the same pixels
exactly: ``floor(t) == round_half_up(t - 0.5)`` and half_pixel's coordinate is tf_half_pixel_for_nn's
``t = (i + 0.5) / scale`` minus 0.5, a subtraction float32 does exactly below 2^22 (the form the
check's finding proposes; it keeps the native resize layer and works at any input size).

Otherwise (``ceil``, ``round_prefer_ceil``, which no attribute pair reproduces), with static input
lengths and output sizes (tf2onnx's constant ``scales``), the input index
of every output index is a constant: the coordinate as onnxruntime computes it in float32
(``(i + 0.5) / scale`` for tf_half_pixel_for_nn; every other mode too, shared with resize-cubic),
rounded by ``nearest_mode`` as onnxruntime rounds (floor, ceil, round_prefer_floor: ties down,
round_prefer_ceil: ties up) and clamped to ``[0, in - 1]``. Each resized axis becomes
``Gather(x, indices, axis)``; an axis whose scale is 1 is copied, as onnxruntime does whatever the
mode. Gather with constant indices has an importer in every release, for any data type.

Left out (findings): ``ceil``/``round_prefer_ceil`` with lengths or sizes known only at run time
(export at a fixed size, or ``--fix-shapes``), ``tf_crop_and_resize`` (its extrapolation value).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._resize import F32, Plan, attr, coordinate
from graphfix.passes.base import LIMIT, WRONG_RESULTS, Context, Pass, Rule


def _refused_combination(node: gs.Node, ctx: Context) -> bool:
    return (attr(node, "mode", "nearest") == "nearest"
            and attr(node, "coordinate_transformation_mode", "half_pixel") == "tf_half_pixel_for_nn"
            and attr(node, "nearest_mode", "round_prefer_floor") != "round_prefer_floor")


def _nearest(node: gs.Node, ctx: Context) -> bool:
    """What ``--force resize-nearest-mode`` rewrites: any nearest Resize (tests use every mode)."""
    return attr(node, "mode", "nearest") == "nearest"


def _round(x: F32, mode: str) -> int:
    """onnxruntime's GetNearestPixelFromOriginal."""
    if mode == "floor":
        return math.floor(x)
    if mode == "ceil":
        return math.ceil(x)
    if mode == "round_prefer_floor" and x == F32(math.floor(x)) + F32(0.5):
        return math.floor(x)
    return int(math.floor(abs(float(x)) + 0.5)) * (1 if x >= 0 else -1)  # std::round: ties away from zero


def indices(length_in: int, length_out: int, scale: float, mode: str, nearest: str) -> np.ndarray:
    out = [_round(coordinate(mode, o, scale, length_in, length_out, (0.0, 1.0)), nearest) for o in range(length_out)]
    return np.clip(np.asarray(out, np.int64), 0, length_in - 1)


def rewrite(node: gs.Node, ctx: Context) -> None:
    if (attr(node, "coordinate_transformation_mode", "half_pixel") == "tf_half_pixel_for_nn"
            and attr(node, "nearest_mode", "round_prefer_floor") == "floor"):
        # floor(t) == round_half_up(t - 0.5): half_pixel's coordinate is t - 0.5, exact in float32
        attrs = {**node.attrs, "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_ceil"}
        replace_tensor(ctx.graph, node.outputs[0], ctx.builder.op("Resize", list(node.inputs), attrs, dtype=node.inputs[0].dtype))
        return
    plan = Plan(node, ctx)
    if plan.mode == "tf_crop_and_resize":
        raise Skip("tf_crop_and_resize is not rewritten (its extrapolation value)")
    nearest = str(attr(node, "nearest_mode", "round_prefer_floor"))
    b, x = ctx.builder, node.inputs[0]
    cur: gs.Tensor = x
    for k in plan.axes:
        idx = indices(plan.length_in[k], plan.length_out[k], plan.scale[k], plan.mode, nearest)
        cur = b.op("Gather", [cur, b.const(idx, hint="nearest")], {"axis": k}, dtype=x.dtype)
    if cur is x:
        cur = b.op("Identity", [x])
    replace_tensor(ctx.graph, node.outputs[0], cur)


PASS = Pass(
    name="resize-nearest-mode",
    summary="Rewrite a nearest Resize the parser refuses (tf_half_pixel_for_nn with floor: half_pixel + round_prefer_ceil; other roundings: constant-index Gathers).",
    ops=frozenset({"Resize"}),
    rules=(
        Rule(LIMIT, ">=8.0,<9.1 || >=10.0", "Resize tf_half_pixel_for_nn needs nearest_mode round_prefer_floor (\"This "
             "version of TensorRT only support round_prefer_floor nearest mode in tf_half_pixel_for_nn!\")",
             _refused_combination, error="resize-nearest-mode", quote="tf_half_pixel_for_nn",
             evidence="importResize: ASSERT(transformationMode != \"tf_half_pixel_for_nn\" || nearest_mode == "
                      "\"round_prefer_floor\"), builtin_op_importers.cpp 8.0-GA..8.6-GA, 9.0-GA; the same STATIC_CHECK in "
                      "onnxOpCheckers.cpp 10.0-GA, 10.1-GA, main@7ecb49a (9.1-9.3 dropped the check); docs/operators.md "
                      "lists tf_half_pixel_for_nn and every nearest_mode without the pairing"),
        Rule(WRONG_RESULTS, ">=9.1,<10.0", "Resize tf_half_pixel_for_nn with a nearest_mode other than round_prefer_floor: "
             "9.1-9.3 ignore nearest_mode there and round half down (other pixels than onnxruntime's)",
             _refused_combination,
             evidence="importResize, builtin_op_importers.cpp 9.1, 9.2, 9.3: no check; tf_half_pixel_for_nn becomes "
                      "HALF_PIXEL with ResizeRoundMode::kCEIL and nearest_mode is applied only to the other modes"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    forced=_nearest,
)
