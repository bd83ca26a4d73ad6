"""causalconv-decompose: CausalConvWithState (opset 27) as Concat + depthwise Conv + Slice.

Why: ONNX added CausalConvWithState in opset 27 (the stateful depthwise convolution of Gated
DeltaNet / Mamba decoders); no TensorRT parser through 11.1 lists it (their operator tables
document opsets <= 24), so every release fails with "No importer registered for op:
CausalConvWithState". Its definition is the three-op pattern it was made to replace, which every
release imports.

How, the op's definition (ONNX reference ``CausalConvWithState``):

* ``padded = Concat(past_state, input)`` along the length axis; without ``past_state`` the state
  is zeros ``[batch, channels, k - 1]`` (``Expand`` of a 0 to the input's batch and channels).
* ``output = Conv(padded, weight, bias, group=channels)`` with no padding: depthwise and causal.
  A 1-D Conv, which every parser imports by expanding it to 2-D (Conv importer, 8.0-GA/8.6-GA/
  10.1-GA: ``needToExpandDims``); ``weight`` (and, before 8.6, ``bias``) must be initializers,
  as for any Conv (fold-weights folds computed ones).
* ``activation`` ``silu``/``swish``: ``output * Sigmoid(output)`` (swish-decompose's helper),
  computed in float32 for fp16 as the reference does.
* ``present_state`` = the last ``k - 1`` positions of ``padded`` (``Slice``).

The Conv sums its k taps in its own order, so outputs agree with onnxruntime's kernel to float
rounding (a few ulps); the state is copied, bit for bit.

Left out (findings): a weight whose kernel size or channel count is not static, bfloat16.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import is_read, optional_input, replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._elementwise import float_dtype, onnx_domain, swish
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.support import evidence

_INT_MAX = np.iinfo(np.int64).max



def rewrite(node: gs.Node, ctx: Context) -> None:
    x, weight = node.inputs[0], node.inputs[1]
    dtype = float_dtype(x, node.op)
    dims = weight.shape
    if dims is None or len(dims) != 3 or not all(isinstance(d, (int, np.integer)) and d > 0 for d in (dims[0], dims[2])):
        raise Skip("the weight's channel count and kernel size must be static (export the weights as initializers)")
    channels, k = int(dims[0]), int(dims[2])
    activation = node.attrs.get("activation", "none")
    activation = activation.decode() if isinstance(activation, bytes) else activation
    if activation not in ("none", "silu", "swish"):
        raise Skip(f"activation {activation!r} is not a CausalConvWithState activation (none, silu, swish)")
    b = ctx.builder
    past, bias = optional_input(node, 3), optional_input(node, 2)
    if k == 1:
        padded = x
    else:
        if past is None:
            size = b.concat([b.slice(b.shape(x), [0], [2], axes=[0]), np.array([k - 1], np.int64)], 0)
            past = b.op("Expand", [np.array(0, dtype), size], dtype=dtype)
        padded = b.concat([past, x], 2)
    conv = b.op("Conv", [padded, weight] + ([bias] if bias is not None else []),
                {"group": channels, "kernel_shape": [k], "pads": [0, 0], "strides": [1], "dilations": [1]}, dtype=dtype)
    if activation != "none":
        wide = conv if dtype == np.float32 else b.cast(conv, np.float32)
        conv = swish(b, wide, 1.0, np.dtype(np.float32))
        conv = conv if dtype == np.float32 else b.cast(conv, dtype)
    replace_tensor(ctx.graph, node.outputs[0], conv)
    if len(node.outputs) > 1 and is_read(node.outputs[1], ctx.graph):
        start = np.array([-(k - 1)] if k > 1 else [_INT_MAX], np.int64)
        replace_tensor(ctx.graph, node.outputs[1], b.slice(padded, start, np.array([_INT_MAX], np.int64), axes=[2]))


PASS = Pass(
    name="causalconv-decompose",
    summary="Rewrite CausalConvWithState (opset 27) into Concat(state, input) + depthwise Conv (+ SiLU) + Slice.",
    ops=frozenset({"CausalConvWithState"}),
    rules=(
        Rule(NO_IMPORTER, "all", "no CausalConvWithState importer in any TensorRT release (opset 27; parser tables end at opset 24)",
             onnx_domain, error="unsupported-op-plugin-fallback-generic",
             evidence=evidence("CausalConvWithState")),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
