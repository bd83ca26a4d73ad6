"""rotary-embedding-decompose: RotaryEmbedding (opset 23) as Gather / Slice / Mul / Sub / Add / Concat.

Why: TensorRT's ONNX parser first lists RotaryEmbedding in 10.15 (operator table at the 10.15 ref
fa5aa9f6, changelog 10.15 "RotaryEmbedding, RMSNormalization, TensorScatter"); every earlier
parser fails with "No importer registered for op: RotaryEmbedding". ``torch.onnx.ops.rotary_embedding``
exports to it (fixtures/real/llama_rotary_op_opset23.onnx: a Llama whose rotary code calls it);
for transformers' own ``rotate_half`` code torch 2.14.1's dynamo exporter writes Slice/Neg/Concat/Mul.

How: the op's definition (ONNX reference ``rotary_embedding``), without its transposes:

* The rotation works on the head axis layout as it is: a 4-D X is ``[batch, heads, seq, head]``
  and the caches get a heads axis of 1 (``Unsqueeze`` at 1); a 3-D X ``[batch, seq, hidden]`` is
  reshaped to ``[batch, seq, num_heads, head]`` (``Reshape`` with 0 for the copied dims) and the
  caches get it at 2; the result is reshaped back.
* ``position_ids`` given: ``cos = Gather(cos_cache, position_ids)`` (axis 0); else the caches
  already are ``[batch, seq, rotary_dim / 2]``.
* The first ``rotary_embedding_dim`` (default: all) features are rotated, the rest copied
  (``Slice`` + ``Concat``). Halves (``x1``, ``x2``) are the two contiguous halves, or for
  ``interleaved`` the even and odd features (``Slice`` with step 2), interleaved back by
  ``Unsqueeze`` / ``Concat`` / ``Reshape``.
* ``real = cos * x1 - sin * x2``, ``imag = sin * x1 + cos * x2``: the reference's operations in
  its order; onnxruntime's kernel agrees to float rounding (it may fuse a multiply-add).

Every op used has an importer in every release >= 7.0 (Slice steps, Gather, Concat, Reshape).

Cost (``bench/newops_latency.py``, onnxruntime 1.32 CPU, 1 thread, a shared and noisy machine): (1, 8, 512, 128) with position_ids, 5.6x onnxruntime's fused kernel (ten elementwise
passes instead of one); TensorRT fuses adjacent pointwise layers.

Left out (findings): a head size that is not static (the halves are static slices), a 3-D X
without ``num_heads``, bfloat16, attributes outside the op's definition (``interleaved`` other
than 0/1, which onnxruntime reads as 0; a negative ``rotary_embedding_dim``).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, optional_input, replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._elementwise import float_dtype
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.support import evidence

_INT_MAX = np.iinfo(np.int64).max


def _static(d: object) -> int | None:
    return int(d) if isinstance(d, (int, np.integer)) and d >= 0 else None


def rewrite(node: gs.Node, ctx: Context) -> None:
    x, cos, sin = node.inputs[0], node.inputs[1], node.inputs[2]
    dtype = float_dtype(x, node.op)
    if x.shape is None or len(x.shape) not in (3, 4):
        raise Skip("X must have a known rank of 3 or 4 (run shape inference upstream)")
    b = ctx.builder
    three_d = len(x.shape) == 3
    if three_d:
        heads, hidden = int(node.attrs.get("num_heads", 0)), _static(x.shape[2])
        if heads <= 0 or hidden is None:
            raise Skip("a 3-D X needs num_heads and a static hidden size")
        head = hidden // heads
        x4 = b.reshape(x, np.array([0, 0, heads, head], np.int64))
    else:
        head, x4 = _static(x.shape[3]), x
        if head is None:
            raise Skip("the head size (last dim of X) is not static (export with a fixed head size)")
    rd = int(node.attrs.get("rotary_embedding_dim", 0)) or head
    if rd < 0 or rd % 2 or rd > head:
        raise Skip(f"rotary_embedding_dim {rd} is negative, odd or larger than the head size {head}")
    interleaved = int(node.attrs.get("interleaved", 0))
    if interleaved not in (0, 1):  # onnxruntime does not read 7 as 1: out of the op's definition, left as it is
        raise Skip(f"interleaved {interleaved} is not one the op defines (0 or 1)")
    positions = optional_input(node, 3)
    if positions is not None:
        cos = b.op("Gather", [cos, positions], {"axis": 0}, dtype=dtype)
        sin = b.op("Gather", [sin, positions], {"axis": 0}, dtype=dtype)
    heads_axis = 2 if three_d else 1
    cos, sin = b.unsqueeze(cos, [heads_axis]), b.unsqueeze(sin, [heads_axis])
    rotated = _rotate(b, x4 if rd == head else b.slice(x4, [0], [rd], axes=[-1]), cos, sin, rd,
                      bool(interleaved), dtype)
    out = rotated if rd == head else b.concat([rotated, b.slice(x4, [rd], [_INT_MAX], axes=[-1])], -1)
    if three_d:
        out = b.reshape(out, np.array([0, 0, hidden], np.int64))
    replace_tensor(ctx.graph, node.outputs[0], out)


def _rotate(b: Builder, x: gs.Tensor, cos: gs.Tensor, sin: gs.Tensor, rd: int, interleaved: bool, dtype: np.dtype) -> gs.Tensor:
    """The rotated ``rd`` features of a 4-D ``x`` (cos/sin broadcast over its heads axis)."""
    half = rd // 2
    if interleaved:
        x1 = b.slice(x, [0], [rd], axes=[-1], steps=[2])
        x2 = b.slice(x, [1], [rd], axes=[-1], steps=[2])
    else:
        x1, x2 = b.slice(x, [0], [half], axes=[-1]), b.slice(x, [half], [rd], axes=[-1])

    def mul(p: gs.Tensor, q: gs.Tensor) -> gs.Tensor:
        return b.op("Mul", [p, q], dtype=dtype)

    real = b.op("Sub", [mul(cos, x1), mul(sin, x2)], dtype=dtype)
    imag = b.op("Add", [mul(sin, x1), mul(cos, x2)], dtype=dtype)
    if not interleaved:
        return b.concat([real, imag], -1)
    pairs = b.concat([b.unsqueeze(real, [-1]), b.unsqueeze(imag, [-1])], -1)
    return b.reshape(pairs, np.array([0, 0, 0, rd], np.int64))


PASS = Pass(
    name="rotary-embedding-decompose",
    summary="Rewrite RotaryEmbedding (opset 23; interleaved, partial, 3-D, position_ids) into Gather/Slice/Mul/Sub/Add/Concat.",
    ops=frozenset({"RotaryEmbedding"}),
    rules=(
        Rule(NO_IMPORTER, "<10.15", "no RotaryEmbedding importer before TensorRT 10.15",
             error="unsupported-op-plugin-fallback-generic",
             evidence=evidence("10.15")),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
