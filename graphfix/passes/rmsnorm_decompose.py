"""rmsnorm-decompose: RMSNormalization (opset 23) as Pow / ReduceMean / Add / Sqrt / Div / Mul.

Why: ``torch.onnx.export(..., dynamo=True, opset_version=23)`` writes ``torch.nn.RMSNorm`` (and
every transformers ``LlamaRMSNorm``-style module it recognises) as one RMSNormalization node; a
tiny Llama exported with torch 2.14.1 has one per norm. TensorRT's ONNX parser first lists
RMSNormalization in 10.15 (operator table at the 10.15 ref, changelog 10.15: "RotaryEmbedding,
RMSNormalization, TensorScatter"); every earlier parser fails with "No importer registered for op:
RMSNormalization" (NVIDIA/TensorRT#4639 asks for it on 10.x). JetPack 6 ships 10.3 and 10.7.

How: the op's own definition (its ONNX function body), ``Y = X / sqrt(mean(X * X) + epsilon) *
scale`` over the axes ``[axis, rank)``, with layernorm-decompose's helpers:

* ``stash_type`` 1 (the default) with fp16/fp64 X: X is cast to float32, normalised there and the
  result cast back to X's type before the scale, as the op specifies.
* The mean is ReduceMean where the target reads its axes (opset < 18, or TensorRT >= 10.0);
  otherwise ReduceSum divided by the element count, because every parser before 10.0 ignores an
  opset-18 ReduceMean's axes input and reduces over all axes (silently wrong). ``Pow(X, 2)`` goes
  with ReduceMean because it completes the pattern onnxruntime's SimplifiedLayerNormFusion turns
  back into its kernel; the ReduceSum form squares with ``Mul(X, X)``.
* Rounding: the same operations in the same order as the function body; onnxruntime's kernel
  accumulates in another order, so outputs agree to float rounding (a few ulps), not bit for bit.

Cost (``bench/newops_latency.py``, onnxruntime 1.32 CPU, 1 thread, a shared and noisy machine), (8, 512, 768) fp32: the ReduceMean/Pow form (targets >= 10.0) runs at 0.7x the
native op (onnxruntime fuses it back into its kernel); the ReduceSum / count form that parsers
before 10.0 need is not fused: 3.1x.

Left out (findings): ``stash_type`` other than 1, bfloat16 X (no numpy constants), a scale whose
type differs from X's, a non-negative ``axis`` on a tensor of unknown rank.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._norm import (
    element_count,
    first_axis,
    float_dtype,
    mean_over,
    reduce_mean_reads_axes,
    stash_dtype,
    uses_reduce_mean,
)
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.support import evidence


def rewrite(node: gs.Node, ctx: Context) -> None:
    x, scale = node.inputs[0], node.inputs[1]
    dtype = float_dtype(x)
    if tensor_dtype(scale) not in (None, dtype):
        raise Skip(f"scale is {tensor_dtype(scale)} but X is {dtype} (only a scale of X's type is decomposed)")
    compute = stash_dtype(node)
    first = first_axis(node, x)
    b = ctx.builder
    axes_ok = reduce_mean_reads_axes(ctx)
    xc = x if compute == dtype else b.cast(x, compute)
    mean = mean_over(b, xc, list(range(first, 0)), element_count(x, first), compute, axes_ok)
    if uses_reduce_mean(b, axes_ok):
        square = b.op("Pow", [xc, np.array(2, compute)], dtype=compute)
    else:
        square = b.op("Mul", [xc, xc], dtype=compute)
    eps = np.array(float(node.attrs.get("epsilon", 1e-5)), compute)
    rms = b.op("Sqrt", [b.op("Add", [mean(square), eps], dtype=compute)], dtype=compute)
    normalized = b.op("Div", [xc, rms], dtype=compute)
    if compute != dtype:
        normalized = b.cast(normalized, dtype)
    replace_tensor(ctx.graph, node.outputs[0], b.op("Mul", [normalized, scale], dtype=dtype))


PASS = Pass(
    name="rmsnorm-decompose",
    summary="Rewrite RMSNormalization (opset 23) into Pow/ReduceMean/Add/Sqrt/Div/Mul (ReduceSum/count before 10.0).",
    ops=frozenset({"RMSNormalization"}),
    rules=(
        Rule(NO_IMPORTER, "<10.15", "no RMSNormalization importer before TensorRT 10.15",
             error="unsupported-op-plugin-fallback-generic",
             evidence=evidence("10.15") + "; NVIDIA/TensorRT#4639, onnx/onnx-tensorrt#1046 (\"RMSNorm support will be "
                                            "available in the 10.15 release\")"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
