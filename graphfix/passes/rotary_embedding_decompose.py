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

import onnx_graphsurgeon as gs

from graphfix.graph import optional_input, replace_tensor
from graphfix.passes._elementwise import float_dtype
from graphfix.passes._rotary import rotate
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.support import evidence


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    rotated = rotate(ctx.builder, node, x, node.inputs[1], node.inputs[2], optional_input(node, 3), float_dtype(x, node.op))
    replace_tensor(ctx.graph, node.outputs[0], rotated)


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
