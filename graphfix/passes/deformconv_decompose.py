"""deformconv-decompose: DeformConv (opset 19) as bilinear gathers plus one grouped MatMul.

Why: TensorRT's ONNX parser first imports DeformConv in 10.1 (10.1-GA ``docs/Changelog.md``:
"Added support for DeformConv operation"; ``importerUtils.cpp`` maps it onto the
``ModulatedDeformConv2d`` plugin); every earlier release has no importer ("No importer registered
for op: DeformConv"). torchvision's ``deform_conv2d`` (opset 19 export), mmcv and Paddle's
deformable convolutions (DCNv2 in PP-YOLOE+, RT-DETR backbones, PaddleOCR) produce it.

How (2-D: X ``[N, C, H, W]``, W ``[M, C/G, kh, kw]``, ``offset`` ``[N, og*kh*kw*2, Ho, Wo]`` with
(dy, dx) per tap, ``mask`` ``[N, og*kh*kw, Ho, Wo]``), as onnxruntime's kernel and torchvision's
``deform_conv2d`` compute it:

1. Each tap k = (i, j) of output (oh, ow) samples at ``y = oh*sh - pad_top + i*dh + dy``,
   ``x = ow*sw - pad_left + j*dw + dx`` (the base grid is a constant).
2. Bilinear sampling with zeros outside: the four corners ``floor(y) + {0,1}``,
   ``floor(x) + {0,1}``, each weighted ``(1-|y-yc|)(1-|x-xc|)`` and kept only where it lies
   inside the image (torchvision's ``bilinear_interpolate``: a corner outside reads 0).
3. Gathers of whole channel rows, as gridsample-decompose does: X as rows ``[N*og*H*W, C/og]``
   (one Transpose), one Gather per corner, weighted sum, times ``mask``.
4. The sampled columns ``[N, G, C/G*kh*kw, Ho*Wo]`` times W as ``[G, M/G, C/G*kh*kw]`` (one
   MatMul), plus B, reshaped to ``[N, M, Ho, Wo]``.

Cost (``bench/deformconv_latency.py``, onnxruntime 1.32 CPU, 1 thread, a shared machine): 1.5x the
native kernel for a DCNv2 block (1x64x32x32 -> 64, 3x3, mask), 4.6-5.2x for narrow layers (16-32
channels: the index math per tap is amortised over fewer channels). A GridSample-based form (one
GridSample over every tap's coordinates, then the same MatMul) was measured at 6.9-16x and
rejected; it would also need GridSample, which no release before 8.5 imports.

fp16 X is gathered in fp16 and interpolated in float32, then cast back. Every op used (Floor,
Gather, Where, MatMul, Transpose, Reshape) has an importer in every 8.x release.

Left out (findings): spatial rank other than 2, input dims (C, H, W) or output dims that are not
static, bfloat16. Non-finite data: a corner outside the image reads a clamped element times 0, so
an inf/NaN there leaks where DeformConv gives 0 (as gridsample-decompose documents).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import optional_input, replace_tensor, static_shape, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)


def _attr(node: gs.Node, name: str, default: list[int]) -> list[int]:
    value = node.attrs.get(name)
    return [int(v) for v in value] if value is not None else default


def rewrite(node: gs.Node, ctx: Context) -> None:
    x, w, offset = node.inputs[0], node.inputs[1], node.inputs[2]
    bias, mask = optional_input(node, 3), optional_input(node, 4)
    dtype = tensor_dtype(x)
    if dtype is None or dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise Skip("X must be float32 or float16")
    xs = x.shape
    if xs is None or len(xs) != 4 or not all(isinstance(d, (int, np.integer)) for d in xs[1:]):
        raise Skip("X must be 4-D with static C, H, W (2-D DeformConv)")
    ws = static_shape(w) if w.shape is not None else None
    if ws is None or len(ws) != 4:
        raise Skip("W's shape must be static")
    _, c, h, wd = (int(d) if isinstance(d, (int, np.integer)) else d for d in xs)
    m, cg_w, kh, kw = ws
    group, og = int(node.attrs.get("group", 1)), int(node.attrs.get("offset_group", 1))
    sh, sw = _attr(node, "strides", [1, 1])
    dh, dw = _attr(node, "dilations", [1, 1])
    pt, pl, pb, pr = _attr(node, "pads", [0, 0, 0, 0])
    ho = (h + pt + pb - (dh * (kh - 1) + 1)) // sh + 1
    wo = (wd + pl + pr - (dw * (kw - 1) + 1)) // sw + 1
    if c % og or c % group or cg_w * group != c or m % group or ho <= 0 or wo <= 0:
        raise Skip("channels, groups and offset groups do not divide evenly (invalid DeformConv)")
    b = ctx.builder
    k = kh * kw
    cg = c // og  # channels per offset group

    # 1. sampling coordinates [N, og, K, Ho, Wo]
    ii, jj = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    base_y = (np.arange(ho)[None, :, None] * sh - pt + (ii.reshape(-1) * dh)[:, None, None]).astype(np.float32)
    base_x = (np.arange(wo)[None, None, :] * sw - pl + (jj.reshape(-1) * dw)[:, None, None]).astype(np.float32)
    off = b.reshape(offset if dtype == F32 else b.cast(offset, F32), np.array([0, og, k, 2, ho, wo], np.int64))
    dy = b.squeeze(b.slice(off, [0], [1], [3]), [3])
    dx = b.squeeze(b.slice(off, [1], [2], [3]), [3])
    y = b.op("Add", [dy, np.broadcast_to(base_y, (k, ho, wo)).copy()], dtype=F32)
    xx = b.op("Add", [dx, np.broadcast_to(base_x, (k, ho, wo)).copy()], dtype=F32)
    y0, x0 = b.op("Floor", [y], dtype=F32), b.op("Floor", [xx], dtype=F32)
    ly, lx = b.op("Sub", [y, y0], dtype=F32), b.op("Sub", [xx, x0], dtype=F32)
    hy, hx = b.op("Sub", [np.array(1, F32), ly], dtype=F32), b.op("Sub", [np.array(1, F32), lx], dtype=F32)
    y1, x1 = b.op("Add", [y0, np.array(1, F32)], dtype=F32), b.op("Add", [x0, np.array(1, F32)], dtype=F32)

    # 3. X as rows [N*og*H*W, cg]; row of (n, g, yc, xc) = ((n*og + g)*H + yc)*W + xc
    rows = b.reshape(b.transpose(b.reshape(x, np.array([0, og, cg, h, wd], np.int64)), [0, 1, 3, 4, 2]),
                     np.array([-1, cg], np.int64))
    batch = b.slice(b.shape(x), [0], [1], [0])
    images = b.op("Range", [np.array(0, np.int64), b.squeeze(b.op("Mul", [batch, np.array([og], np.int64)]), [0]),
                            np.array(1, np.int64)], dtype=I64)
    first_row = b.reshape(b.op("Mul", [images, np.array(h * wd, np.int64)], dtype=I64), np.array([-1, og, 1, 1, 1], np.int64))

    def corner(yc: gs.Tensor, xc: gs.Tensor, weight: gs.Tensor) -> gs.Tensor:
        def within(t: gs.Tensor, size: int) -> gs.Tensor:  # DeformConv is opset 19: GreaterOrEqual exists
            return b.op("And", [b.op("GreaterOrEqual", [t, np.array(0, F32)], dtype=np.bool_),
                                b.op("Less", [t, np.array(size, F32)], dtype=np.bool_)], dtype=np.bool_)

        inside = b.op("And", [within(yc, h), within(xc, wd)], dtype=np.bool_)
        yi = b.op("Min", [b.op("Max", [yc, np.array(0, F32)], dtype=F32), np.array(h - 1, F32)], dtype=F32)
        xi = b.op("Min", [b.op("Max", [xc, np.array(0, F32)], dtype=F32), np.array(wd - 1, F32)], dtype=F32)
        flat = b.cast(b.op("Add", [b.op("Mul", [yi, np.array(wd, F32)], dtype=F32), xi], dtype=F32), I64)
        index = b.op("Add", [flat, first_row], dtype=I64)  # [N, og, K, Ho, Wo]
        picked = b.op("Gather", [rows, index], {"axis": 0}, dtype=dtype)  # [N, og, K, Ho, Wo, cg]
        picked = picked if dtype == F32 else b.cast(picked, F32)
        kept = b.op("Where", [inside, weight, np.array(0, F32)], dtype=F32)
        return b.op("Mul", [picked, b.unsqueeze(kept, [5])], dtype=F32)

    # 2. the four corners, weighted
    terms = [corner(y0, x0, b.op("Mul", [hy, hx], dtype=F32)), corner(y0, x1, b.op("Mul", [hy, lx], dtype=F32)),
             corner(y1, x0, b.op("Mul", [ly, hx], dtype=F32)), corner(y1, x1, b.op("Mul", [ly, lx], dtype=F32))]
    sampled = b.op("Add", [b.op("Add", [terms[0], terms[1]], dtype=F32), b.op("Add", [terms[2], terms[3]], dtype=F32)],
                   dtype=F32)
    if mask is not None:
        mk = b.reshape(mask if dtype == F32 else b.cast(mask, F32), np.array([0, og, k, ho, wo, 1], np.int64))
        sampled = b.op("Mul", [sampled, mk], dtype=F32)

    # 4. columns [N, og, cg, K, Ho*Wo] -> [N, G, C/G*K, Ho*Wo]; W [G, M/G, C/G*K]
    columns = b.transpose(sampled, [0, 1, 5, 2, 3, 4])
    columns = b.reshape(columns, np.array([0, group, (c // group) * k, ho * wo], np.int64))
    weights = b.reshape(w if dtype == F32 else b.cast(w, F32), np.array([group, m // group, cg_w * k], np.int64))
    y_out = b.reshape(b.op("MatMul", [weights, columns], dtype=F32), np.array([0, m, ho, wo], np.int64))
    if bias is not None:
        y_out = b.op("Add", [y_out, b.reshape(bias if dtype == F32 else b.cast(bias, F32), np.array([m, 1, 1], np.int64))],
                     dtype=F32)
    replace_tensor(ctx.graph, node.outputs[0], y_out if dtype == F32 else b.cast(y_out, dtype))


PASS = Pass(
    name="deformconv-decompose",
    summary="Rewrite DeformConv (opset 19, 2-D, offset groups, mask) into bilinear Gathers and one grouped MatMul.",
    ops=frozenset({"DeformConv"}),
    rules=(
        Rule(NO_IMPORTER, "<10.1", "no DeformConv importer before TensorRT 10.1", error="unsupported-op-plugin-fallback-generic",
             evidence="10.1-GA docs/Changelog.md (\"Added support for DeformConv operation\"), importerUtils.cpp 10.1-GA "
                      "(ModulatedDeformConv2d plugin); no DeformConv in builtin_op_importers.cpp 8.6-GA/10.0-GA; "
                      "operator table first lists it in 10.1"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
