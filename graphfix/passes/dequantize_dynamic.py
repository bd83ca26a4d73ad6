"""dequantize-dynamic (opt-in, NOT exact): onnxruntime's dynamic quantization rewritten to the float
computation it approximates, with the dequantized constant weights. The model is no longer quantized.

Why: ``onnxruntime.quantization.quantize_dynamic`` writes ``DynamicQuantizeLinear`` (activations
quantized at run time, scale from each tensor's own min/max) feeding ``MatMulInteger``/``ConvInteger``,
then ``Cast`` to float and ``Mul`` by ``x_scale * w_scale``; LSTMs become ``com.microsoft``
``DynamicQuantizeLSTM``, and onnxruntime's optimizer fuses the chains into ``MatMulIntegerToFloat``/
``DynamicQuantizeMatMul``. No TensorRT release imports any of them (graphfix/trt/data: no importer
in the source of any release 6.0..10.x), and TensorRT has
no run-time (dynamic) activation quantization to map them to: its INT8 needs a calibrated static
scale. The float model with the quantized weights dequantized is what TensorRT can build (and
quantize again statically, with calibration, if wanted).

How: ``MatMulInteger(DynamicQuantizeLinear(x), Wq, x_zp, w_zp)`` -> ``Cast`` -> ``Mul(x_scale * w_scale)``
becomes ``MatMul(x, (Wq - w_zp) w_scale)``; ``ConvInteger`` the same ``Conv`` (its attributes kept);
``MatMulIntegerToFloat`` (A from a DynamicQuantizeLinear) and ``DynamicQuantizeMatMul`` a ``MatMul``
plus their bias; ``DynamicQuantizeLSTM`` an ONNX ``LSTM`` whose W/R are the dequantized weights
transposed back to ONNX's ``[directions, 4*hidden, input]`` (onnxruntime's quantizer stores them
transposed: onnxruntime/quantization/operators/lstm.py). quantize_dynamic's embeddings,
``DequantizeLinear(Gather(Wq, ids))`` with a per-tensor scale, become ``Gather(W, ids)`` on the
float weights (exact: the dequantization commutes with the lookup). The weights keep their quantization
error; only the activations' run-time rounding is gone, so outputs differ from the quantized
model by that rounding (the step reports it, graphfix.pipeline.inexact).

Left out (findings): a chain other than the one onnxruntime writes (the integer output read by
anything but one Cast to float and one Mul by ``x_scale * w_scale``), weights, scales or zero
points that are not constants, a ConvInteger with per-channel weight scales.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import is_weights, optional_input, replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._contrib import MS_DOMAIN
from graphfix.passes.base import LIMIT, NO_IMPORTER, Context, Pass, Rule

F32 = np.dtype(np.float32)
#: What `graphfix check` says for these nodes (they have no exact rewrite).
REMEDY = ("TensorRT has no run-time activation quantization: deploy the float model, or quantize it "
          "statically (onnxruntime quantize_static with QuantFormat.QDQ and symmetric INT8, or NVIDIA ModelOpt); "
          "`graphfix fix --dequantize-dynamic` writes the float computation on the dequantized weights (not exact: the "
          "written model is no longer quantized)")
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_LSTM_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "input_forget")
_ONNX_OPS = frozenset({"MatMulInteger", "ConvInteger"})
_MS_OPS = frozenset({"DynamicQuantizeLSTM", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"})


def _known(t: gs.Tensor | None, ctx: Context, what: str) -> np.ndarray:
    value = ctx.folder.value(t) if t is not None and is_weights(t, empty=False) else None
    if value is None:
        raise Skip(f"its {what} '{getattr(t, 'name', '')}' is not a constant")
    return np.asarray(value)


def _zero(node: gs.Node, k: int, ctx: Context, what: str) -> np.ndarray:
    t = optional_input(node, k)
    return np.zeros((), np.int32) if t is None else _known(t, ctx, what)


def _producer(t: gs.Tensor, op: str) -> gs.Node | None:
    return t.inputs[0] if t.inputs and t.inputs[0].op == op else None


def _dynamic_source(a: gs.Tensor, zero: gs.Tensor | None) -> gs.Node:
    """The DynamicQuantizeLinear that quantized ``a`` (and wrote its zero point ``zero``)."""
    dql = _producer(a, "DynamicQuantizeLinear")
    if dql is None or dql.outputs[0] is not a or (zero is not None and zero is not dql.outputs[2]):
        raise Skip("its quantized input does not come from a DynamicQuantizeLinear")
    return dql


def dequantized(weights: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """``(w - z) * s`` in float32 (scale and zero point broadcast as given)."""
    return ((weights.astype(np.float64) - zero.astype(np.float64)) * scale.astype(np.float64)).astype(F32)


def _scale_chain(node: gs.Node, dql: gs.Node, ctx: Context) -> tuple[gs.Tensor, np.ndarray]:
    """onnxruntime's ``Cast(to float) -> Mul(x_scale * w_scale)`` after an integer op: (the Mul's
    output, which the float op will compute, and w_scale)."""
    out = node.outputs[0]
    cast = out.outputs[0] if len(out.outputs) == 1 and out not in ctx.graph.outputs else None
    if cast is None or cast.op != "Cast" or int(cast.attrs.get("to", 0)) != 1:
        raise Skip("its int32 output is not read by one Cast to float alone (onnxruntime's scale chain)")
    casted = cast.outputs[0]
    mul = casted.outputs[0] if len(casted.outputs) == 1 and casted not in ctx.graph.outputs else None
    if mul is None or mul.op != "Mul":
        raise Skip("its float output is not read by one Mul by the scales alone (onnxruntime's scale chain)")
    scales = mul.inputs[1] if mul.inputs[0] is casted else mul.inputs[0]
    product = _producer(scales, "Mul")
    if product is None or dql.outputs[1] not in product.inputs:
        raise Skip("the Mul after it does not scale by x_scale * w_scale")
    w_scale = product.inputs[1] if product.inputs[0] is dql.outputs[1] else product.inputs[0]
    return mul.outputs[0], _known(w_scale, ctx, "weight scale")


def _integer(node: gs.Node, ctx: Context) -> None:
    """MatMulInteger / ConvInteger and their scale chain as MatMul / Conv on the float input."""
    b = ctx.builder
    dql = _dynamic_source(node.inputs[0], optional_input(node, 2))
    weights = _known(node.inputs[1], ctx, "weights")
    w_zero = _zero(node, 3, ctx, "weight zero point")
    result, w_scale = _scale_chain(node, dql, ctx)
    if node.op == "ConvInteger":
        if w_scale.size != 1:
            raise Skip("per-channel weight scales of a ConvInteger are not dequantized")
        shaped = w_zero.reshape((-1,) + (1,) * (weights.ndim - 1)) if w_zero.size > 1 else w_zero.reshape(())
        w = b.const(dequantized(weights, w_scale.reshape(()), shaped), hint="weights")
        y = b.op("Conv", [dql.inputs[0], w], {k: node.attrs[k] for k in _CONV_ATTRS if k in node.attrs}, dtype=F32)
    else:
        w = b.const(dequantized(weights, w_scale, w_zero), hint="weights")
        y = b.op("MatMul", [dql.inputs[0], w], dtype=F32)
    replace_tensor(ctx.graph, result, y)


def _matmul_to_float(node: gs.Node, ctx: Context) -> None:
    """MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp, b_zp, bias) with A from a DynamicQuantizeLinear,
    and DynamicQuantizeMatMul(A float, B, b_scale, b_zp, bias): MatMul(x, dequantized B) (+ bias)."""
    b = ctx.builder
    if node.op == "MatMulIntegerToFloat":
        dql = _dynamic_source(node.inputs[0], optional_input(node, 4))
        if node.inputs[2] is not dql.outputs[1]:
            raise Skip("its a_scale is not the DynamicQuantizeLinear's scale")
        x, w_scale, w_zero, bias = dql.inputs[0], _known(node.inputs[3], ctx, "b_scale"), _zero(node, 5, ctx, "b_zero_point"), 6
    else:
        x, w_scale, w_zero, bias = node.inputs[0], _known(node.inputs[2], ctx, "b_scale"), _zero(node, 3, ctx, "b_zero_point"), 4
    w = b.const(dequantized(_known(node.inputs[1], ctx, "weights"), w_scale, w_zero), hint="weights")
    y = b.op("MatMul", [x, w], dtype=F32)
    if optional_input(node, bias) is not None:
        y = b.op("Add", [y, node.inputs[bias]], dtype=F32)
    replace_tensor(ctx.graph, node.outputs[0], y)


def _lstm_weights(node: gs.Node, k: int, ctx: Context, what: str) -> np.ndarray:
    """W or R of a DynamicQuantizeLSTM, [directions, in, 4*hidden] quantized, as ONNX's float
    [directions, 4*hidden, in]. Scales/zero points: [directions] or [directions, 4*hidden]."""
    weights = _known(node.inputs[k], ctx, what)
    scale, zero = _known(node.inputs[8 + 2 * (k - 1)], ctx, f"{what} scale"), _known(node.inputs[9 + 2 * (k - 1)], ctx,
                                                                                       f"{what} zero point")
    shape = (weights.shape[0], 1, -1) if scale.ndim == 2 else (weights.shape[0], 1, 1)
    return dequantized(weights, scale.reshape(shape), zero.reshape(shape)).transpose(0, 2, 1).copy()


def _lstm(node: gs.Node, ctx: Context) -> None:
    b = ctx.builder
    if len(node.inputs) < 12:
        raise Skip("DynamicQuantizeLSTM without its 12 inputs")
    w, r = _lstm_weights(node, 1, ctx, "W"), _lstm_weights(node, 2, ctx, "R")
    ins = [node.inputs[0], b.const(w, hint="W"), b.const(r, hint="R")] + [optional_input(node, k) for k in range(3, 8)]
    while ins and ins[-1] is None:
        ins.pop()
    outs = b.op("LSTM", ins, {k: node.attrs[k] for k in _LSTM_ATTRS if k in node.attrs}, dtype=F32, outputs=3)
    for old, new in zip(node.outputs, outs, strict=False):
        if old.outputs or old in ctx.graph.outputs:
            replace_tensor(ctx.graph, old, new)


def _gathered_weights(node: gs.Node, ctx: Context) -> bool:
    """A DequantizeLinear of a Gather from constant 8-bit weights (quantize_dynamic's embeddings:
    weight-only quantization) with a per-tensor constant scale."""
    x = node.inputs[0]
    gather = _producer(x, "Gather")
    if node.op != "DequantizeLinear" or gather is None or not is_weights(gather.inputs[0], empty=False):
        return False
    weights, scale = ctx.folder.value(gather.inputs[0]), ctx.folder.value(node.inputs[1])
    return weights is not None and np.asarray(weights).dtype in (np.int8, np.uint8) and scale is not None \
        and np.asarray(scale).size == 1


def _embedding(node: gs.Node, ctx: Context) -> None:
    """DequantizeLinear(Gather(Wq, ids)) as Gather(dequantized W, ids): the same values (a per-tensor
    dequantization commutes with the lookup), the weights float."""
    b, gather = ctx.builder, node.inputs[0].inputs[0]
    scale, zero = _known(node.inputs[1], ctx, "scale"), _zero(node, 2, ctx, "zero point")
    weights = b.const(dequantized(_known(gather.inputs[0], ctx, "weights"), scale.reshape(()), zero.reshape(())), hint="weights")
    replace_tensor(ctx.graph, node.outputs[0], b.op("Gather", [weights, gather.inputs[1]], dict(gather.attrs), dtype=F32))


def _dynamic(node: gs.Node, ctx: Context) -> bool:
    domain = node.domain or ""
    if node.op == "DequantizeLinear":
        return domain in ("", "ai.onnx") and _gathered_weights(node, ctx)
    return node.op in (_MS_OPS if domain == MS_DOMAIN else _ONNX_OPS if domain in ("", "ai.onnx") else ())


def clears(node: gs.Node, ctx: Context) -> bool:
    """The rewrite removes ``node``: one it matches, or a DynamicQuantizeLinear read only by those (`graphfix check`'s remedy)."""
    if node.op == "DynamicQuantizeLinear":
        readers = [r for t in node.outputs for r in t.outputs]
        return bool(readers) and all(r.op == "Mul" or _dynamic(r, ctx) for r in readers)
    return _dynamic(node, ctx)


def rewrite(node: gs.Node, ctx: Context) -> None:
    if node.op == "DynamicQuantizeLSTM":
        _lstm(node, ctx)
    elif node.op == "DequantizeLinear":
        _embedding(node, ctx)
    elif node.op in _ONNX_OPS:
        _integer(node, ctx)
    else:
        _matmul_to_float(node, ctx)


PASS = Pass(
    name="dequantize-dynamic",
    summary="Opt-in, not exact: dynamic quantization (DynamicQuantizeLinear + MatMulInteger/ConvInteger, DynamicQuantizeLSTM, "
            "MatMulIntegerToFloat, DynamicQuantizeMatMul, quantized Gather embeddings) as the float op on dequantized "
            "weights; no longer quantized.",
    ops=_ONNX_OPS | _MS_OPS | {"DequantizeLinear"},
    rules=(
        Rule(NO_IMPORTER, "all", "dynamic quantization: no TensorRT importer, and no run-time activation quantization",
             _dynamic, ops=_ONNX_OPS | _MS_OPS, error="unsupported-op-plugin-fallback-generic",
             evidence="graphfix/trt/data parser support (operator tables and importer sources 6.0..10.x): "
                      "MatMulInteger, ConvInteger, DynamicQuantizeLinear have no importer in any release; com.microsoft "
                      "ops have none either (onnx-tensorrt imports the ONNX domain only)"),
        Rule(LIMIT, ">=8.0", "8-bit embedding dequantized after its Gather (weight-only quantization): UINT8 or a zero point "
             "other than 0", _gathered_weights, ops=frozenset({"DequantizeLinear"}),
             evidence="onnx-tensorrt QuantDequantLinearHelper: ASSERT(shiftIsAllZeros(zeroPoint)) 8.0-GA..10.1-GA, "
                      "notInvalidType(... {\"UINT8\"}) from 8.5-GA"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    domains=frozenset({"", "ai.onnx", MS_DOMAIN}),
    exact=False,
)
