"""col2im-to-convtranspose: Col2Im (F.fold / nn.Fold) as one ConvTranspose with a one-hot kernel.

Why: no TensorRT parser imports Col2Im (opset 18; "No importer registered for op: Col2Im", the
operator tables list it as unsupported from 10.0 through 11.1 and not at all before).

How: Col2Im scatters block element ``j`` (row-major position ``(k_1, ..., k_D)`` inside the
kernel) of block ``(b_1, ..., b_D)`` to image position ``b_i * stride_i + k_i * dilation_i -
pad_begin_i`` and sums overlaps. That is exactly a transposed convolution whose kernel maps input
channel ``j`` to kernel tap ``(k_1, ..., k_D)``: weight ``eye(K).reshape(K, 1, *block)``. The
channels are folded into the batch, so the kernel does not depend on C (which may be dynamic)
and no grouping is needed::

    [N, C*K, L] -Reshape-> [N*C, K, B_1, ..., B_D] -ConvTranspose(one-hot, strides, dilations,
    pads)-> [N*C, 1, *image] -Reshape-> [N, C, *image]

(A grouped ConvTranspose with group = C and a ``[C*K, 1, *block]`` weight computes the same but
needs C statically and a C-times larger constant.) The block grid ``B_i = (image_i + pads -
dilation_i*(block_i-1) - 1) // stride_i + 1``; when the image is longer than the last block reaches
(the division's remainder ``r_i``), the end padding is reduced by ``r_i`` and any rest becomes
``output_padding`` (those positions get no block: zero, as in Col2Im). Every output element is a
sum of the same input elements in both ops, so the rewrite is exact up to float summation order.

1-D Col2Im is lifted to 2-D (a unit axis) so every release's 2-D deconvolution handles it. 3-D uses
3-D ConvTranspose; TensorRT <= 8.2 rejects asymmetric 3-D deconvolution padding, so there the
padding is done by cropping (Slice) a zero-padded canvas instead, plus an end Pad when the image
extends past the last block. ``image_shape``/``block_shape`` must be constants (the kernel and
the block grid depend on them); other cases, non-float data and D > 3 are left as findings.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule


def rewrite(node: gs.Node, ctx: Context) -> None:
    x, y = node.inputs[0], node.outputs[0]
    image, block = ctx.folder.value(node.inputs[1]), ctx.folder.value(node.inputs[2])
    if image is None or block is None:
        raise Skip("image_shape and block_shape must be constants (they set the kernel and the block grid)")
    image, block = [int(v) for v in np.asarray(image).reshape(-1)], [int(v) for v in np.asarray(block).reshape(-1)]
    dims = len(block)
    if dims not in (1, 2, 3) or len(image) != dims:
        raise Skip(f"{dims}-D Col2Im: only 1-D to 3-D fold is rewritten (TensorRT deconvolution is at most 3-D)")
    dtype = tensor_dtype(x)
    if dtype is None or dtype.kind != "f":
        raise Skip("Col2Im on non-float data (ConvTranspose is float-only)")
    dil = [int(v) for v in node.attrs.get("dilations", [1] * dims)]
    strides = [int(v) for v in node.attrs.get("strides", [1] * dims)]
    pads = [int(v) for v in node.attrs.get("pads", [0] * (2 * dims))]
    out_image = list(image)
    if dims == 1:  # a unit leading axis: 2-D deconvolution everywhere
        image, block, dil, strides, pads = [1, *image], [1, *block], [1, *dil], [1, *strides], [0, pads[0], 0, pads[1]]
    geometry = _Geometry(image, block, dil, strides, pads)
    if any(n <= 0 for n in geometry.blocks):
        raise Skip("no block fits in the padded image")
    replace_tensor(ctx.graph, y, _fold(ctx.builder, x, geometry, dtype, out_image))


class _Geometry:
    """Block grid and the ConvTranspose padding that reproduces a Col2Im's image."""

    def __init__(self, image: list[int], block: list[int], dil: list[int], strides: list[int], pads: list[int]) -> None:
        d = len(image)
        self.image, self.block, self.dil, self.strides = image, block, dil, strides
        self.begin, end = pads[:d], pads[d:]
        span = [image[i] + self.begin[i] + end[i] - dil[i] * (block[i] - 1) - 1 for i in range(d)]
        self.blocks = [s // strides[i] + 1 if s >= 0 else 0 for i, s in enumerate(span)]
        rest = [s % strides[i] if s >= 0 else 0 for i, s in enumerate(span)]
        self.end = [max(end[i] - rest[i], 0) for i in range(d)]  # image = canvas - begin - end + extra
        self.extra = [max(rest[i] - end[i], 0) for i in range(d)]

    @property
    def kernel(self) -> np.ndarray:
        k = int(np.prod(self.block))
        return np.eye(k).reshape(k, 1, *self.block)

    @property
    def direct(self) -> bool:
        """ConvTranspose pads/output_padding express it (3-D must be symmetric for TensorRT <= 8.2)."""
        return len(self.image) <= 2 or (self.begin == self.end and not any(self.extra))


def _fold(b: Builder, x: gs.Tensor, geo: _Geometry, dtype: np.dtype, out_image: list[int]) -> gs.Tensor:
    k = int(np.prod(geo.block))
    cols = b.reshape(x, np.array([-1, k, *geo.blocks], np.int64))  # [N*C, K, *blocks]
    attrs: dict[str, object] = {"kernel_shape": geo.block, "strides": geo.strides, "dilations": geo.dil}
    weight = b.const(geo.kernel.astype(dtype), hint="one_hot")
    if geo.direct:
        attrs["pads"] = geo.begin + geo.end
        if any(geo.extra):
            attrs["output_padding"] = geo.extra
        image = b.op("ConvTranspose", [cols, weight], attrs)
    else:
        image = _crop(b, b.op("ConvTranspose", [cols, weight], attrs), geo)
    return b.reshape(image, _out_shape(b, x, k, out_image))


def _crop(b: Builder, canvas: gs.Tensor, geo: _Geometry) -> gs.Tensor:
    """Unpadded canvas -> image: Slice off the begin/end padding, zero-Pad past the last block."""
    d = len(geo.image)
    axes = list(range(2, 2 + d))
    ends = [geo.begin[i] + geo.image[i] - geo.extra[i] for i in range(d)]
    out = b.slice(canvas, geo.begin, ends, axes=axes)
    if any(geo.extra):
        out = b.op("Pad", [out, np.array([0] * (2 + d) + [0, 0] + geo.extra, np.int64)])
    return out


def _out_shape(b: Builder, x: gs.Tensor, k: int, image: list[int]) -> gs.Tensor:
    """[N, C, *image] with whichever of N / C*K is static, else N read from the input."""
    shape = list(x.shape or [None, None, None])
    if isinstance(shape[0], (int, np.integer)) and shape[0] >= 0:
        return b.const(np.array([shape[0], -1, *image], np.int64))
    if isinstance(shape[1], (int, np.integer)) and shape[1] > 0:
        return b.const(np.array([-1, shape[1] // k, *image], np.int64))
    return b.concat([b.slice(b.shape(x), [0], [1]), b.const(np.array([-1, *image], np.int64))], 0)


PASS = Pass(
    name="col2im-to-convtranspose",
    summary="Rewrite Col2Im (F.fold) as Reshape + ConvTranspose with a one-hot kernel + Reshape (exact).",
    ops=frozenset({"Col2Im"}),
    rules=(
        Rule(NO_IMPORTER, "all", "no Col2Im importer in any release", error="col2im-not-supported",
             evidence="operator table (unsupported 10.0-11.1, unlisted before); importer source 10.1"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
