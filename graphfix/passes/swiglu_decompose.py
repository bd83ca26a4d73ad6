"""swiglu-decompose: SwiGLU (opset 28) as ``A * Sigmoid(alpha * A) * B``, its function body.

Why: ONNX added SwiGLU in opset 28 (onnx 1.23); no TensorRT parser through 11.1 lists it (their
operator tables document opsets <= 24), so every release fails with "No importer registered for
op: SwiGLU". A graph optimiser that fuses a Llama MLP's ``silu(gate_proj(x)) * up_proj(x)``
into it makes the whole decoder unparsable.

How: the function body ``Mul(Swish_alpha(A), B)`` with Swish itself decomposed as swish-decompose
does (``A * Sigmoid(alpha * A)``, the inner Mul left out for ``alpha`` = 1), in the inputs' float
type. The op does not broadcast (A and B have one shape); Mul would, so a valid node keeps its
meaning. Sigmoid and Mul have importers in every release.

Verification: onnxruntime 1.32 cannot run opset-28 SwiGLU itself ("Could not find an
implementation for Swish(24)"), so graphfix runs such an original on the ONNX reference evaluator
(asked of the installed onnxruntime once, ``graphfix.verify.sessions``) and the rewrite on onnxruntime.

Left out: bfloat16 inputs (a finding).
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor
from graphfix.passes._elementwise import float_dtype, onnx_domain, swish
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.support import evidence


def rewrite(node: gs.Node, ctx: Context) -> None:
    a, v = node.inputs[0], node.inputs[1]
    dtype = float_dtype(a, node.op)
    gated = swish(ctx.builder, a, float(node.attrs.get("alpha", 1.0)), dtype)
    replace_tensor(ctx.graph, node.outputs[0], ctx.builder.op("Mul", [gated, v], dtype=dtype))


PASS = Pass(
    name="swiglu-decompose",
    summary="Rewrite SwiGLU (opset 28) into A * Sigmoid(alpha * A) * B, its function body.",
    ops=frozenset({"SwiGLU"}),
    rules=(
        Rule(NO_IMPORTER, "all", "no SwiGLU importer in any TensorRT release (opset 28; parser tables end at opset 24)",
             onnx_domain, error="unsupported-op-plugin-fallback-generic",
             evidence=evidence("SwiGLU")),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
