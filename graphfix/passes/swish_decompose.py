"""swish-decompose: Swish (opset 24) as ``x * Sigmoid(alpha * x)``, its function body.

Why: TensorRT's ONNX parser first lists Swish in 11.0 (operator table at the 11.0 ref 2f3fa349,
changelog 11.0 "Swish operator"); every 10.x and older parser fails with "No importer registered
for op: Swish". ONNX added Swish in opset 24; a graph that has it (from a graph optimiser's
SiLU fusion or written by hand) is unparsable on every 10.x. torch 2.14.1's dynamo exporter itself
still writes SiLU as ``Mul(x, Sigmoid(x))``, at opset 23 and 24 alike.

How: the function body, in the input's float type (fp16 stays fp16, as the body computes):
``Mul(x, Sigmoid(Mul(alpha, x)))``; for the default ``alpha`` = 1 the inner Mul is left out
(multiplying by 1 is exact). Sigmoid and Mul have importers in every release.

Cost (``bench/newops_latency.py``, onnxruntime 1.32 CPU, 1 thread, a shared and noisy machine): (8, 512, 768) fp32, 0.3x onnxruntime's Swish kernel (its Sigmoid * Mul is faster).

Left out: bfloat16 X (numpy has no bfloat16 constants: a finding); ``com.microsoft`` namesakes.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor
from graphfix.passes._elementwise import float_dtype, onnx_domain, swish
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.support import evidence


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    dtype = float_dtype(x, node.op)
    replace_tensor(ctx.graph, node.outputs[0], swish(ctx.builder, x, float(node.attrs.get("alpha", 1.0)), dtype))


PASS = Pass(
    name="swish-decompose",
    summary="Rewrite Swish (opset 24) into x * Sigmoid(alpha * x), its function body.",
    ops=frozenset({"Swish"}),
    rules=(
        Rule(NO_IMPORTER, "<11.0", "no Swish importer before TensorRT 11.0", onnx_domain,
             error="unsupported-op-plugin-fallback-generic",
             evidence=evidence("11.0")),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
