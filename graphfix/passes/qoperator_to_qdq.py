"""qoperator-to-qdq: onnxruntime's QOperator graphs (QLinearConv, QLinearMatMul, QLinearAdd, ...)
as DequantizeLinear -> float op -> QuantizeLinear, the explicit-quantization form TensorRT reads.

Why: ``onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QOperator)`` writes
every quantized layer as one integer kernel: ``QLinearConv``/``QLinearMatMul`` (ONNX) and
``com.microsoft`` ``QLinearAdd``/``QLinearMul``/``QLinearSigmoid``/``QLinearLeakyRelu``/
``QLinearSoftmax``/``QLinearGlobalAveragePool``/``QLinearAveragePool``/``QLinearConcat``/``QGemm``.
No TensorRT release has an importer for any of them (operator tables 8.x-10.x list none;
``builtin_op_importers.cpp`` has none), so every QOperator model fails to parse. TensorRT does
int8 through Q/DQ pairs around float layers ("explicit quantization"), which it fuses back into
int8 kernels.

How: each node becomes ``DequantizeLinear`` of every quantized input (its scale and zero point),
the float op with the node's attributes, and ``QuantizeLinear`` to the output's scale and zero
point. Per-channel weight scales dequantize on axis 0 (opset >= 13). The int32 bias of
QLinearConv / QGemm (scale ``x_scale * w_scale``, zero point 0) becomes a float initializer
``B * x_scale * w_scale``, computed here. Results: the float op on the dequantized values,
requantized once, where onnxruntime's kernels requantize the int32 accumulator — the same up to
one quantization step where the float rounding lands on the other side of a .5 (onnxruntime
documents the same for its own QDQ execution).

Zero points and types are kept; only nodes whose known zero points are 0 (INT8) or 128 (UINT8,
which qdq-uint8-to-int8 then makes INT8 0) are rewritten: with any other zero point the Q/DQ form
would be refused as well ("TensorRT only supports symmetric quantization"), so the node stays and
`graphfix check` names the re-quantization to do (or ``--requantize-symmetric``, whose step lowers
them with ``--force``'s predicate, then re-quantizes: graphfix.pipeline.inexact).

Cost on onnxruntime CPU (``bench/contrib_latency.py``, 1 thread, QDQ / QOperator, three runs):
0.35-1.3x on the quantizer fixtures (CNN s8s8 0.35x: onnxruntime re-fuses the QDQ groups into its
own int8 kernels; BERT u8s8 1.0x); TensorRT fuses the Q/DQ pairs into int8 layers itself.

Left out (findings): ``channels_last`` layouts, a conv/gemm bias whose scales are not
initializers, per-channel scales below opset 13, a QLinearSoftmax over an axis other than the
last, a QGemm with an output scale but a float C of another scale.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, optional_input, replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._contrib import MS_DOMAIN
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule

F32 = np.dtype(np.float32)
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")


def _value(t: gs.Tensor | None) -> np.ndarray | None:
    return np.asarray(t.values) if isinstance(t, gs.Constant) else None


def _dq(b: Builder, x: gs.Tensor, scale: gs.Tensor, zero: gs.Tensor | None, opset: int) -> gs.Tensor:
    ins = [x, scale] + ([zero] if zero is not None else [])
    scale_value = _value(scale)
    per_channel = scale_value is not None and scale_value.size > 1 or (scale.shape is not None and len(scale.shape) == 1
                                                                       and scale.shape[0] != 1)
    if per_channel and opset < 13:
        raise Skip("a per-channel scale needs DequantizeLinear's axis (opset >= 13)")
    return b.op("DequantizeLinear", ins, {"axis": 0} if per_channel else {}, dtype=F32)


def _q(b: Builder, y: gs.Tensor, scale: gs.Tensor, zero: gs.Tensor | None, like: gs.Tensor) -> gs.Tensor:
    ins = [y, scale] + ([zero] if zero is not None else [])
    return b.op("QuantizeLinear", ins, dtype=like.dtype)


def _float_bias(node: gs.Node, k: int, x_scale: gs.Tensor, w_scale: gs.Tensor, b: Builder) -> gs.Tensor | None:
    bias = optional_input(node, k)
    if bias is None:
        return None
    values = [_value(t) for t in (bias, x_scale, w_scale)]
    if any(v is None for v in values):
        raise Skip("the int32 bias or its scales are not initializers")
    q, xs, ws = values
    return b.const((q.astype(np.float64) * xs.astype(np.float64) * ws.astype(np.float64)).astype(np.float32), hint="bias")


def _unary(float_op: str, attrs: dict | None = None):
    """X, X_scale, X_zp, Y_scale, Y_zp -> Q(op(DQ(X)))."""
    def lower(node: gs.Node, ctx: Context) -> gs.Tensor:
        b, ins = ctx.builder, node.inputs
        y = b.op(float_op, [_dq(b, ins[0], ins[1], optional_input(node, 2), ctx.opset)], attrs or {}, dtype=F32)
        return _q(b, y, ins[3], optional_input(node, 4), node.outputs[0])
    return lower


def _binary(float_op: str):
    """A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp -> Q(op(DQ(A), DQ(B)))."""
    def lower(node: gs.Node, ctx: Context) -> gs.Tensor:
        b, ins = ctx.builder, node.inputs
        a = _dq(b, ins[0], ins[1], optional_input(node, 2), ctx.opset)
        w = _dq(b, ins[3], ins[4], optional_input(node, 5), ctx.opset)
        return _q(b, b.op(float_op, [a, w], dtype=F32), ins[6], optional_input(node, 7), node.outputs[0])
    return lower


def _conv(node: gs.Node, ctx: Context) -> gs.Tensor:
    if int(node.attrs.get("channels_last", 0)):
        raise Skip("channels_last QLinearConv is not lowered")
    b, ins = ctx.builder, node.inputs
    x = _dq(b, ins[0], ins[1], optional_input(node, 2), ctx.opset)
    w = _dq(b, ins[3], ins[4], optional_input(node, 5), ctx.opset)
    bias = _float_bias(node, 8, ins[1], ins[4], b)
    attrs = {k: node.attrs[k] for k in _CONV_ATTRS if k in node.attrs}
    y = b.op("Conv", [x, w] + ([bias] if bias is not None else []), attrs, dtype=F32)
    return _q(b, y, ins[6], optional_input(node, 7), node.outputs[0])


def _gemm(node: gs.Node, ctx: Context) -> gs.Tensor:
    b, ins = ctx.builder, node.inputs
    a = _dq(b, ins[0], ins[1], optional_input(node, 2), ctx.opset)
    w = _dq(b, ins[3], ins[4], optional_input(node, 5), ctx.opset)
    c = optional_input(node, 6)
    y_scale = optional_input(node, 7)
    if c is not None and y_scale is not None:  # quantized output: C is int32 at scale a_scale * b_scale
        c = _float_bias(node, 6, ins[1], ins[4], b)
    attrs = {k: node.attrs[k] for k in ("alpha", "transA", "transB") if k in node.attrs}
    y = b.op("Gemm", [a, w] + ([c] if c is not None else []), attrs, dtype=F32)
    return y if y_scale is None else _q(b, y, y_scale, optional_input(node, 8), node.outputs[0])


def _softmax(node: gs.Node, ctx: Context) -> gs.Tensor:
    x = node.inputs[0]
    axis = int(node.attrs.get("axis", -1))
    rank = len(x.shape) if x.shape is not None else None
    if axis != -1 and (rank is None or axis != rank - 1):
        raise Skip(f"QLinearSoftmax over axis {axis} (only the last axis is lowered)")
    return _unary("Softmax", {"axis": -1 if ctx.opset >= 13 else (rank - 1 if rank is not None else -1)})(node, ctx)


def _global_pool(node: gs.Node, ctx: Context) -> gs.Tensor:
    if int(node.attrs.get("channels_last", 0)):
        raise Skip("channels_last pooling is not lowered")
    return _unary("GlobalAveragePool")(node, ctx)


def _average_pool(node: gs.Node, ctx: Context) -> gs.Tensor:
    if int(node.attrs.get("channels_last", 0)):
        raise Skip("channels_last pooling is not lowered")
    return _unary("AveragePool", {k: node.attrs[k] for k in _POOL_ATTRS if k in node.attrs})(node, ctx)


def _concat(node: gs.Node, ctx: Context) -> gs.Tensor:
    b, ins = ctx.builder, node.inputs
    if (len(ins) - 2) % 3:
        raise Skip("QLinearConcat's inputs are not (tensor, scale, zero point) triples")
    parts = [_dq(b, ins[i], ins[i + 1], ins[i + 2] if ins[i + 2].name else None, ctx.opset) for i in range(2, len(ins), 3)]
    y = b.op("Concat", parts, {"axis": int(node.attrs["axis"])}, dtype=F32)
    return _q(b, y, ins[0], ins[1] if ins[1].name else None, node.outputs[0])


def _leaky(node: gs.Node, ctx: Context) -> gs.Tensor:
    return _unary("LeakyRelu", {"alpha": float(node.attrs.get("alpha", 0.01))})(node, ctx)


_ONNX = {"QLinearConv": _conv, "QLinearMatMul": _binary("MatMul")}
_MICROSOFT = {"QLinearConv": _conv, "QLinearAdd": _binary("Add"), "QLinearMul": _binary("Mul"), "QLinearSigmoid": _unary("Sigmoid"),
              "QLinearLeakyRelu": _leaky, "QLinearSoftmax": _softmax, "QLinearGlobalAveragePool": _global_pool,
              "QLinearAveragePool": _average_pool, "QLinearConcat": _concat, "QGemm": _gemm}


def _lowering(node: gs.Node):
    domain = node.domain or ""
    table = _MICROSOFT if domain == MS_DOMAIN else _ONNX if domain in ("", "ai.onnx") else {}
    return table.get(node.op)


#: Where each op's zero points are (QLinearConcat: its output's, then one per input triple).
_ZERO_POINTS = {"QLinearConv": (2, 5, 7), "QLinearMatMul": (2, 5, 7), "QLinearAdd": (2, 5, 7), "QLinearMul": (2, 5, 7),
                "QGemm": (2, 5, 8)}


def _zero_point_inputs(node: gs.Node) -> list[gs.Tensor]:
    if node.op == "QLinearConcat":
        return [node.inputs[i] for i in [1, *range(4, len(node.inputs), 3)] if i < len(node.inputs)]
    return [node.inputs[i] for i in _ZERO_POINTS.get(node.op, (2, 4)) if i < len(node.inputs)]


def _symmetric(node: gs.Node, ctx: Context) -> bool:
    """Every known zero point is 0 (INT8) or 128 (UINT8, which qdq-uint8-to-int8 makes INT8 0): the
    Q/DQ form is then one TensorRT reads. Asymmetric ranges have no exact symmetric form: the
    QOperator node stays, and `graphfix check` says to re-quantize."""
    for t in _zero_point_inputs(node):
        value = ctx.folder.value(t) if t.name else None
        if value is None:
            continue
        value = np.asarray(value)
        if not ((value == 0).all() if value.dtype == np.int8 else (value == 128).all() if value.dtype == np.uint8 else False):
            return False
    return True


def _qoperator(node: gs.Node, ctx: Context) -> bool:
    return _lowering(node) is not None and _symmetric(node, ctx)


def rewrite(node: gs.Node, ctx: Context) -> None:
    if "channels_last" in node.attrs and int(node.attrs["channels_last"]):
        raise Skip("channels_last layouts are not lowered")
    replace_tensor(ctx.graph, node.outputs[0], _lowering(node)(node, ctx))


PASS = Pass(
    name="qoperator-to-qdq",
    summary="Rewrite onnxruntime's QOperator ops (QLinearConv/MatMul/Add/Mul/Sigmoid/Softmax/Concat/pools, QGemm) as DequantizeLinear -> float op -> QuantizeLinear.",
    ops=frozenset(_ONNX) | frozenset(_MICROSOFT),
    rules=(
        Rule(NO_IMPORTER, "all", "QOperator (integer kernel) op: no TensorRT importer; TensorRT quantizes through Q/DQ pairs",
             _qoperator, error="unsupported-op-plugin-fallback-generic",
             evidence="operator tables 8.0-10.x list no QLinear*/QGemm op; builtin_op_importers.cpp (8.5-GA, 10.1-GA) has "
                      "importers for QuantizeLinear/DequantizeLinear only; TensorRT developer guide, 'Explicit Quantization'"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    domains=frozenset({"", "ai.onnx", "com.microsoft"}),
    # forced (--force, and --requantize-symmetric's step, which makes the asymmetric Q/DQ symmetric
    # next): every QOperator node it can lower, whatever its zero points
    forced=lambda node, ctx: _lowering(node) is not None,
)
