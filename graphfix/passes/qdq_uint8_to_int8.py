"""qdq-uint8-to-int8: UINT8 Q/DQ whose zero point is 128 as INT8 Q/DQ with zero point 0 (exact).

Why: TensorRT quantizes to INT8 only and only symmetrically. From 8.5 the importer refuses UINT8
(``QuantDequantLinearHelper``: ``notInvalidType(inputs.at(0), {"UINT8"})`` "Found invalid input type
of UINT8", builtin_op_importers.cpp 8.5-GA, 8.6-GA, 9.x; onnxOpImporters.cpp 10.0-GA, 10.1-GA), and
every release asserts a weights zero point of all zeros ("TensorRT only supports symmetric
quantization", ``shiftIsAllZeros``, 8.0-GA ... 10.1-GA); 8.0-8.4 do not check the type and
quantize to INT8 anyway (values above 127 saturate: wrong results). onnxruntime's quantizers write
UINT8 activations by default, and a symmetric UINT8 range has zero point 128 (QOperator models
lowered by qoperator-to-qdq keep theirs).

How: ``q_u8 = clamp(round(x / s) + 128, 0, 255)`` is ``q_i8 + 128`` with ``q_i8 = clamp(round(x / s),
-128, 127)``, so a QuantizeLinear with zero point 128 becomes one with an INT8 zero point 0 and its
DequantizeLinear consumers read the INT8 tensor with zero point 0 (``(q_u8 - 128) s == q_i8 s``);
a DequantizeLinear of UINT8 weights with zero point 128 gets the weights minus 128 as INT8. Same
values, bit for bit.

Left out: any other zero point (asymmetric quantization has no exact symmetric form; `graphfix
check` names the re-quantization to do), a QuantizeLinear whose output is a graph output or read
by anything but DequantizeLinear (its UINT8 values are the model's interface), UINT8 graph inputs.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import is_weights, optional_input, replace_tensor
from graphfix.passes.base import TYPE, WRONG_RESULTS, Context, Pass, Rule

U8, I8 = np.dtype(np.uint8), np.dtype(np.int8)
_SOURCE = ("onnx-tensorrt QuantDequantLinearHelper: notInvalidType(... {\"UINT8\"}), builtin_op_importers.cpp 8.5-GA, "
           "8.6-GA, 9.0-GA, 9.3; onnxOpImporters.cpp 10.0-GA, 10.1-GA; ASSERT(shiftIsAllZeros(zeroPoint)) 8.0-GA..10.1-GA")


def _zero_128(t: gs.Tensor | None, ctx: Context) -> bool:
    """A UINT8 zero point known to be 128 everywhere."""
    if t is None or not is_weights(t, empty=False):
        return False
    value = ctx.folder.value(t)
    return value is not None and np.asarray(value).dtype == U8 and bool((np.asarray(value) == 128).all())


def _readers_are_dq_128(t: gs.Tensor, ctx: Context) -> bool:
    return bool(t.outputs) and t not in ctx.graph.outputs and all(
        n.op == "DequantizeLinear" and n.inputs[0] is t and _zero_128(optional_input(n, 2), ctx) for n in t.outputs)


def _shiftable(node: gs.Node, ctx: Context) -> bool:
    if not _zero_128(optional_input(node, 2), ctx):
        return False
    if node.op == "QuantizeLinear":
        return _readers_are_dq_128(node.outputs[0], ctx)
    x = node.inputs[0]
    return is_weights(x, empty=False) and ctx.folder.value(x) is not None and np.asarray(ctx.folder.value(x)).dtype == U8


def _zeros_like(b, zero: gs.Tensor, ctx: Context) -> gs.Constant:
    return b.const(np.zeros(np.asarray(ctx.folder.value(zero)).shape, I8), hint="zero_point")


def rewrite(node: gs.Node, ctx: Context) -> None:
    b, zero = ctx.builder, node.inputs[2]
    if node.op == "DequantizeLinear":
        weights = np.asarray(ctx.folder.value(node.inputs[0])).astype(np.int16) - 128
        shifted = b.const(weights.astype(I8), hint="int8_weights")
        replace_tensor(ctx.graph, node.outputs[0], b.op("DequantizeLinear", [shifted, node.inputs[1], _zeros_like(b, zero, ctx)],
                                                        dict(node.attrs), dtype=node.outputs[0].dtype))
        return
    quantized = b.op("QuantizeLinear", [node.inputs[0], node.inputs[1], _zeros_like(b, zero, ctx)], dict(node.attrs), dtype=I8)
    for reader in list(node.outputs[0].outputs):
        replace_tensor(ctx.graph, reader.outputs[0], b.op("DequantizeLinear",
                                                          [quantized, reader.inputs[1], _zeros_like(b, reader.inputs[2], ctx)],
                                                          dict(reader.attrs), dtype=reader.outputs[0].dtype))


PASS = Pass(
    name="qdq-uint8-to-int8",
    summary="Rewrite UINT8 QuantizeLinear/DequantizeLinear with zero point 128 as INT8 with zero point 0 (the same values).",
    ops=frozenset({"QuantizeLinear", "DequantizeLinear"}),
    rules=(
        Rule(TYPE, ">=8.5", "UINT8 Q/DQ (zero point 128): TensorRT quantizes to INT8 only, with zero point 0", _shiftable,
             error="qdq-uint8", evidence=_SOURCE),
        Rule(WRONG_RESULTS, ">=8.0,<8.5", "UINT8 Q/DQ (zero point 128): read as INT8 with a nonzero zero point", _shiftable,
             evidence="builtin_op_importers.cpp 8.0-GA..8.4-GA: no type check, the layer quantizes to INT8; " + _SOURCE),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
