"""layernorm-decompose: LayerNormalization as ReduceMean / Sub / Pow / ReduceMean / Add / Sqrt / Div / Mul / Add.

Why: parsers before 8.6 have no LayerNormalization importer although 8.4/8.5 claim opset 17
("No importer registered for op: LayerNormalization", the failure of every opset-17 transformer
export on 8.4/8.5). From 8.6 the importer returns Y only and the model importer asserts
``node.output().size() <= outputs.size()``, so a node that *lists* Mean or InvStdDev fails with
"Node has more output tensors than TRT expected, expected output size is 1, actual output size
is 3" (importer source 8.6 and 10.1, NVIDIA/TensorRT#3457 on 8.6.1, depth-anything-tensorrt#48 on
10.3; the 10.1+ operator table says "Only output Y may be used"). The dynamo exporter writes
``native_layer_norm`` as a three-output LayerNormalization, usually with the statistics unused.

How:

* Y only is needed and the target is >= 8.6 (``--trt``): the node is rewritten as the same
  LayerNormalization with only its Y output (the parser's native normalization layer stays).
* otherwise the exact two-pass form, the one ``torch.onnx.export`` wrote for ``nn.LayerNorm`` at
  opset <= 16 (which TensorRT's builder and onnxruntime's LayerNormFusion both recognise):
  ``D = X - mean(X)``, ``Y = D / sqrt(mean(D ** 2) + epsilon) * Scale + B`` over the axes
  ``[axis, rank)``. ``E[X**2] - E[X]**2`` (the op's function body) was rejected: it cancels
  catastrophically for inputs with a large mean. Mean and InvStdDev (``1 / sqrt(...)``) are built
  only when something reads them.
* ``stash_type`` 1 with fp16/fp64 X: X is cast to float32, standardised there, cast back, then
  scaled and shifted in X's type, as the op specifies; Mean/InvStdDev are float32. TensorRT's
  warning about LayerNorm overflow in FP16 concerns exactly the fp16 Pow/ReduceMean this avoids.
* Reduction axes: at opset >= 18 ReduceMean takes its axes as an input, which every parser
  before 10.0 ignores (its ReduceMean importer reads only the attribute and then reduces over all
  axes: silently wrong). There the mean is ReduceSum (whose axes input the parsers read since
  opset 13) divided by the element count (a constant, or ``ReduceProd`` of the shape), and the
  square is ``Mul(D, D)``, unless the target is >= 10.0. ``Pow(D, 2)`` is kept with ReduceMean
  only because it completes the pattern the LayerNorm fusions look for.

Cost (``bench/norm_latency.py``, onnxruntime CPU, 1 thread, (8, 512, 768) fp32, a shared and
noisy machine): the opset-17 form runs at 0.6x-1.3x the native op, because onnxruntime's
LayerNormFusion turns it back into its kernel (``Mul(D, D)`` instead of Pow defeats the fusion:
3-5x); with graph optimisations off it costs 4-8x (seven memory passes instead of two), as does
the opset >= 18 ReduceSum form, which no fusion recognises.

Left out: a ``stash_type`` other than 1 (bfloat16 statistics), bfloat16 X (TensorRT < 9 has no
BF16 anyway), and a non-negative ``axis`` on a tensor of unknown rank (reported as findings).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import is_read, optional_input, replace_tensor
from graphfix.passes._norm import (
    element_count,
    first_axis,
    float_dtype,
    reduce_mean_reads_axes,
    standardize,
    stash_dtype,
)
from graphfix.passes.base import LIMIT, NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.versions import TrtVersion

#: First release with a LayerNormalization importer (and the Y-only output restriction).
IMPORTER = TrtVersion("8.6")


def _lists_statistics(node: gs.Node, ctx: Context) -> bool:
    return len(node.outputs) > 1



def rewrite(node: gs.Node, ctx: Context) -> None:
    y, stats = node.outputs[0], [t for t in node.outputs[1:] if is_read(t, ctx.graph)]
    if ctx.trt is not None and ctx.trt >= IMPORTER and not stats:
        replace_tensor(ctx.graph, y, ctx.builder.op("LayerNormalization", list(node.inputs), dict(node.attrs)))
        return
    x = node.inputs[0]
    dtype = float_dtype(x)
    compute = stash_dtype(node)
    first = first_axis(node, x)  # normalised axes, counted from the end
    b = ctx.builder
    xc = x if compute == dtype else b.cast(x, compute)
    m = standardize(b, xc, list(range(first, 0)), element_count(x, first), float(node.attrs.get("epsilon", 1e-5)),
                    compute, reduce_mean_reads_axes(ctx))
    out = m.normalized if compute == dtype else b.cast(m.normalized, dtype)
    scale, bias = optional_input(node, 1), optional_input(node, 2)
    if scale is not None:
        out = b.op("Mul", [out, scale])
    if bias is not None:
        out = b.op("Add", [out, bias])
    replace_tensor(ctx.graph, y, out)
    if len(node.outputs) > 1 and is_read(node.outputs[1], ctx.graph):
        replace_tensor(ctx.graph, node.outputs[1], m.mean)
    if len(node.outputs) > 2 and is_read(node.outputs[2], ctx.graph):
        replace_tensor(ctx.graph, node.outputs[2], b.op("Div", [np.array(1, compute), m.std], dtype=compute))


PASS = Pass(
    name="layernorm-decompose",
    summary="Rewrite LayerNormalization into ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add (or drop unused Mean/InvStdDev outputs on >= 8.6).",
    ops=frozenset({"LayerNormalization"}),
    rules=(
        Rule(NO_IMPORTER, "<8.6", "no LayerNormalization importer (8.4/8.5 claim opset 17 without one)",
             error="layernormalization-not-supported", evidence="operator table; importer source 8.4-8.5"),
        Rule(LIMIT, ">=8.6", "Mean/InvStdDev outputs listed: only Y is imported (\"Node has more output tensors than TRT expected\")",
             _lists_statistics, evidence="importer source 8.6/10.1; NVIDIA/TensorRT#3457; operator table 10.1+"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
