"""contrib-activation-lower: onnxruntime's fused activations as standard ONNX.

Why: onnxruntime's transformer optimizer fuses ``MatMul -> Add -> Gelu`` into ``BiasGelu`` or
``FastGelu`` (the tanh form, with its bias), diffusers' GEGLU into ``BiasSplitGelu``, CLIP's
``x * sigmoid(1.702 x)`` into ``QuickGelu``, and residual adds into ``BiasAdd``, all in the
``com.microsoft`` domain. No TensorRT release has an importer for them (the parser looks importers
up by op type, ``ModelImporter.cpp``, and falls back to a plugin that does not exist). A
``com.microsoft`` ``Gelu`` meets the ONNX Gelu importer from 10.0 on (same name, same erf meaning),
so only earlier releases reject it.

How (formulas from onnxruntime's ContribOperators.md and the schemas it registers), in the input's
float type as the kernels compute:

* ``Gelu``: ``0.5 x (1 + erf(x / sqrt(2)))``; ``BiasGelu(A, B)``: Gelu of ``A + B``.
* ``FastGelu(X, bias?)``: ``x = X (+ bias)``, ``0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3)))``.
* ``QuickGelu(X)``: ``X * sigmoid(alpha X)`` (``alpha`` 1.702 by default).
* ``BiasAdd(X, bias, skip)``: ``X + bias + skip``.
* ``BiasSplitGelu(X, bias)``: ``x = X + bias`` split in two halves on the last axis; ``left * Gelu(right)``.

Every op written (Add, Mul, Div, Erf, Tanh, Sigmoid, Slice) has an importer in every release >= 7.0.

Cost (``bench/contrib_latency.py``, onnxruntime CPU, 1 thread, lowered / native, three runs):
BiasGelu 1x128x3072 0.88-1.01x (re-fused), FastGelu 2.6-2.7x (the tanh chain stays unfused).
Left out (findings): bfloat16 or non-float inputs; a BiasSplitGelu whose last dim is not static.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, optional_input
from graphfix.graph.build import Skip
from graphfix.passes._contrib import NO_CONTRIB_IMPORTER, float_type, replace_typed
from graphfix.passes._elementwise import erf_gelu, swish, tanh_gelu
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule


def _plus(b: Builder, x: gs.Tensor, bias: gs.Tensor | None) -> gs.Tensor:
    return x if bias is None else b.op("Add", [x, bias])


def _bias_split_gelu(b: Builder, node: gs.Node, dtype: np.dtype) -> gs.Tensor:
    x = _plus(b, node.inputs[0], node.inputs[1])
    bias = node.inputs[1].shape
    width = bias[-1] if bias else None
    if not isinstance(width, (int, np.integer)) or width % 2:
        raise Skip("the bias length is not static and even (BiasSplitGelu halves X's last axis, the bias's length)")
    half = int(width) // 2
    left = b.slice(x, [0], [half], [-1])
    right = b.slice(x, [half], [int(width)], [-1])
    return b.op("Mul", [left, erf_gelu(b, right, dtype)])


def rewrite(node: gs.Node, ctx: Context) -> None:
    b = ctx.builder
    dtype = float_type(node, 0, 1, 2)
    op = node.op
    if op == "Gelu":
        y = erf_gelu(b, node.inputs[0], dtype)
    elif op == "BiasGelu":
        y = erf_gelu(b, _plus(b, node.inputs[0], node.inputs[1]), dtype)
    elif op == "FastGelu":
        y = tanh_gelu(b, _plus(b, node.inputs[0], optional_input(node, 1)), dtype)
    elif op == "QuickGelu":
        y = swish(b, node.inputs[0], float(node.attrs.get("alpha", 1.702)), dtype)
    elif op == "BiasAdd":
        y = b.op("Add", [b.op("Add", [node.inputs[0], node.inputs[1]]), node.inputs[2]])
    else:
        y = _bias_split_gelu(b, node, dtype)
    replace_typed(ctx.graph, node.outputs[0], y, dtype)


PASS = Pass(
    name="contrib-activation-lower",
    summary="Lower onnxruntime's fused activations (Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd, BiasSplitGelu) to standard ONNX.",
    ops=frozenset({"Gelu", "BiasGelu", "FastGelu", "QuickGelu", "BiasAdd", "BiasSplitGelu"}),
    rules=(
        Rule(NO_IMPORTER, "all", "onnxruntime contrib op: no TensorRT importer (plugin fallback fails)",
             ops=frozenset({"BiasGelu", "FastGelu", "QuickGelu", "BiasAdd", "BiasSplitGelu"}),
             error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
        Rule(NO_IMPORTER, ">=7.0,<10.0-EA", "com.microsoft Gelu: no Gelu importer before TensorRT 10.0",
             ops=frozenset({"Gelu"}), error="gelu-not-supported",
             evidence="operator table (Gelu first listed in 10.0-EA); ModelImporter.cpp imports by op_type, so from "
                      "10.0 the ONNX Gelu importer reads it (same erf formula)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    domains=frozenset({"com.microsoft"}),
)
