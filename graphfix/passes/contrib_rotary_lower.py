"""contrib-rotary-lower: onnxruntime's ``com.microsoft`` RotaryEmbedding as Gather / Slice / Mul / Concat.

Why: onnxruntime's transformer optimizer fuses a Llama/Phi rotary block into ``com.microsoft``
``RotaryEmbedding(input, position_ids, cos_cache, sin_cache)``. No TensorRT release reads it: the
parser looks importers up by op type, domain ignored (``ModelImporter.cpp``); before 10.15 there is
no RotaryEmbedding importer at all, and the 10.15 one is the opset-23 ONNX op's, whose inputs come
in another order (X, cos_cache, sin_cache, position_ids), so it would read the positions as the
cosines.

How (onnxruntime's ContribOperators.md and the schema it registers): ``position_ids`` is either
``[batch, seq]`` or one offset ``[1]`` (positions ``offset .. offset + seq - 1``); the caches are
gathered at the positions and the rotation is rotary-embedding-decompose's (the same formula,
``interleaved`` and partial ``rotary_embedding_dim`` included, 3-D input with ``num_heads``).

Cost (``bench/contrib_latency.py``, onnxruntime CPU, 1 thread, lowered / native, three runs):
5.3-10x at 1x128x768, 12 heads (about 0.15 ms against the kernel's 0.03 ms: two Gathers and six
elementwise ops where the kernel makes one pass; TensorRT fuses such chains).

Left out (findings): ``is_packed_batching``, ``scale`` other than 1, a rank of X that is not known,
a head size that is not static, bfloat16.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph.build import Skip
from graphfix.passes._contrib import NO_CONTRIB_IMPORTER, float_type, replace_typed
from graphfix.passes._rotary import rotate, rotate_heads
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule


def rewrite(node: gs.Node, ctx: Context) -> None:
    if int(node.attrs.get("is_packed_batching", 0)):
        raise Skip("is_packed_batching=1 is not lowered")
    if float(node.attrs.get("scale", 1.0)) != 1.0:
        raise Skip("scale other than 1 is not lowered")
    x, positions, cos, sin = node.inputs[:4]
    dtype = float_type(node, 0, 2, 3)
    if x.shape is None:
        raise Skip("the rank of the input is unknown (run shape inference upstream)")
    b = ctx.builder
    if positions.shape is not None and len(positions.shape) == 1:  # one offset: offset + arange(seq)
        seq = b.squeeze(b.slice(b.shape(x), [len(x.shape) - 2], [len(x.shape) - 1], [0]), [0])
        arange = b.op("Range", [np.array(0, np.int64), seq, np.array(1, np.int64)], dtype=np.int64)
        positions = b.unsqueeze(b.op("Add", [arange, b.cast(positions, np.int64)], dtype=np.int64), [0])
    replace_typed(ctx.graph, node.outputs[0], _rotated(b, node, x, cos, sin, positions, dtype), dtype)


def _rotated(b, node: gs.Node, x: gs.Tensor, cos: gs.Tensor, sin: gs.Tensor, positions: gs.Tensor, dtype: np.dtype) -> gs.Tensor:
    """rotate(); a 4-D input whose head size inference lost (after another contrib op) rotates whole
    heads of twice the caches' width when no rotary_embedding_dim says otherwise."""
    head = x.shape[-1]
    half = cos.shape[-1] if cos.shape else None
    if len(x.shape) == 4 and not isinstance(head, (int, np.integer)) and not int(node.attrs.get("rotary_embedding_dim", 0)) \
            and isinstance(half, (int, np.integer)):
        interleaved = int(node.attrs.get("interleaved", 0))
        if interleaved not in (0, 1):
            raise Skip(f"interleaved {interleaved} is not one the op defines (0 or 1)")
        return rotate_heads(b, x, 2 * int(half), cos, sin, positions, 2 * int(half), bool(interleaved), dtype, 1)
    return rotate(b, node, x, cos, sin, positions, dtype)


PASS = Pass(
    name="contrib-rotary-lower",
    summary="Lower onnxruntime's com.microsoft RotaryEmbedding (positions or one offset, interleaved, partial) to Gather/Slice/Mul/Concat.",
    ops=frozenset({"RotaryEmbedding"}),
    rules=(
        Rule(NO_IMPORTER, "all", "onnxruntime contrib RotaryEmbedding: no TensorRT importer reads its input order",
             error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    domains=frozenset({"com.microsoft"}),
)
