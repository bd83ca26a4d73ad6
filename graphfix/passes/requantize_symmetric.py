"""requantize-symmetric (opt-in, NOT exact): asymmetric INT8/UINT8 Q/DQ (and UINT8 Q/DQ with zero
point 0) as symmetric INT8 Q/DQ with zero point 0 and a scale that covers the same real range.

Why: every TensorRT release asserts a weights zero point of all zeros ("TensorRT only supports
symmetric quantization", ``shiftIsAllZeros``, onnx-tensorrt QuantDequantLinearHelper,
builtin_op_importers.cpp 8.0-GA..9.3, onnxOpImporters.cpp 10.0-GA, 10.1-GA) and refuses UINT8 from
8.5. onnxruntime's ``quantize_static`` writes asymmetric UINT8 activations and weights by default.
An asymmetric range has no exact symmetric form, so this rewrite changes results: it runs only
when asked (``--requantize-symmetric``), never under ``--passes all``/``auto``, and its step
reports how far each output moved (graphfix.pipeline.inexact).

How: a quantized tensor with scale ``s`` and zero point ``z`` of a type with range [qmin, qmax]
represents the real range ``[s (qmin - z), s (qmax - z)]``; its symmetric INT8 scale is
``s' = max(|lo|, |hi|) / 127``, zero point 0 (INT8). A QuantizeLinear and the DequantizeLinear
nodes that read it get ``s'`` together (one rewrite, so the region's float outputs are what is
compared). Constant weights behind a DequantizeLinear are known: their scale is the one that
covers their own values, ``max |w| / 127`` per channel (never wider than the declared range's),
and they are re-quantized to it (round half to even, clamp to [-127, 127]). The symmetric range is
wider than the original on one side, so the activation is clipped to the original range first
(``Clip(lo, hi)``): values beyond the calibrated range saturate where the model saturated them.
Each activation's rounding step grows from ``s`` to ``s'`` (up to about 2x for a range with zero
near one end): that is the deviation, about one new step per re-quantized tensor, compounded by
the layers after it.

Left out (findings): UINT8 zero point 128 (qdq-uint8-to-int8 rewrites it exactly), a
QuantizeLinear whose integer output is a graph output or is read by anything but a
DequantizeLinear of the same scale and zero point, directly or through one op that only moves or
selects integers (MaxPool, Reshape, Transpose, ...: those are re-typed INT8 with it; anything else
reads the integers as integers, the model's interface),
scales or zero points that are not constants, blocked quantization (``block_size``), per-channel
activation quantization (a QuantizeLinear with a per-axis scale).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import is_weights, optional_input, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import LIMIT, Context, Pass, Rule

I8 = np.dtype(np.int8)
#: What `graphfix check` adds to a blocking finding on such a Q/DQ (after the exact remedy: quantize
#: symmetrically from the float model).
REMEDY = ("`graphfix fix --requantize-symmetric` converts it to symmetric INT8 covering the same range (not exact: kept "
          "within 8 quantization steps per output, the deviation reported)")
#: The integer types whose zero points this rewrites, with their ranges.
RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}
_SOURCE = ("onnx-tensorrt QuantDequantLinearHelper: ASSERT(shiftIsAllZeros(zeroPoint)) 'TensorRT only supports symmetric "
           "quantization', builtin_op_importers.cpp 8.0-GA..8.6-GA, 9.1, 9.3; onnxOpImporters.cpp 10.0-GA, 10.1-GA; "
           "notInvalidType(... {\"UINT8\"}) from 8.5-GA")


def _known(t: gs.Tensor | None, ctx: Context) -> np.ndarray | None:
    if t is None or not is_weights(t, empty=False):
        return None
    value = ctx.folder.value(t)
    return None if value is None else np.asarray(value)


def asymmetric(zero: np.ndarray | None) -> bool:
    """What TensorRT refuses and only a re-quantization clears: an INT8 zero point that is not all 0,
    a UINT8 one that is not all 128 (128 is qdq-uint8-to-int8's, exact; UINT8 with zero point 0,
    a range [0, 255 s], is refused as UINT8 from 8.5 and read as INT8 before)."""
    if zero is None or zero.dtype not in RANGES:
        return False
    if zero.dtype == np.uint8:
        return not bool((zero == 128).all())
    return bool(zero.any())


def symmetric_scale(scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """The INT8 scale (zero point 0) whose range [-127 s', 127 s'] covers [s (qmin - z), s (qmax - z)]."""
    qmin, qmax = RANGES[zero.dtype]
    s, z = scale.astype(np.float64), zero.astype(np.float64)
    return (np.maximum(np.abs(s * (qmin - z)), np.abs(s * (qmax - z))) / 127).astype(scale.dtype)


def _quantization(node: gs.Node, ctx: Context) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, zero point) when both are constants and the zero point is asymmetric."""
    scale, zero = _known(optional_input(node, 1), ctx), _known(optional_input(node, 2), ctx)
    if scale is None or not asymmetric(zero) or scale.dtype.kind != "f":
        return None
    return scale, zero


#: Ops that move or select quantized integers without arithmetic (a QOperator model's UINT8 MaxPool
#: between its Q and DQ): they commute with any nondecreasing requantization, so a QuantizeLinear
#: reaches its DequantizeLinear through one of them unchanged.
PASSTHROUGH = frozenset({"MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def _source_quantize(node: gs.Node) -> gs.Node | None:
    """The QuantizeLinear a DequantizeLinear reads, directly or through one :data:`PASSTHROUGH` op."""
    x = node.inputs[0]
    producer = x.inputs[0] if x.inputs else None
    if producer is not None and producer.op in PASSTHROUGH and producer.inputs and producer.inputs[0].inputs:
        producer = producer.inputs[0].inputs[0]
    return producer if producer is not None and producer.op == "QuantizeLinear" else None


def _reads_quantize(node: gs.Node) -> bool:
    return _source_quantize(node) is not None


def _asymmetric_qdq(node: gs.Node, ctx: Context) -> bool:
    """A QuantizeLinear, or a DequantizeLinear not fed by one (its Q's rewrite covers it), with a
    known asymmetric zero point."""
    return _quantization(node, ctx) is not None and (node.op == "QuantizeLinear" or not _reads_quantize(node))


def clears(node: gs.Node, ctx: Context) -> bool:
    """The rewrite makes ``node`` symmetric INT8 (`graphfix check`'s remedy): one it matches, or a
    DequantizeLinear of an asymmetric QuantizeLinear's output."""
    if _asymmetric_qdq(node, ctx):
        return True
    source = _source_quantize(node) if node.op == "DequantizeLinear" else None
    return source is not None and _quantization(source, ctx) is not None


def _along(values: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A per-tensor (size 1) or per-axis (1-D) scale/zero point shaped to broadcast over a tensor of ``rank``."""
    if values.size == 1:
        return values.reshape(())
    shape = [1] * rank
    shape[axis % rank] = values.size
    return values.reshape(shape)


def _zeros(zero: np.ndarray) -> np.ndarray:
    return np.zeros(zero.shape, I8)


def requantized_weights(weights: np.ndarray, scale: np.ndarray, zero: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(INT8 weights, new scale): the real weights ``s (w - z)`` re-quantized symmetrically with the
    scale that covers their own values per channel (the declared range's where a channel is all 0)."""
    rank = weights.ndim
    s, z = _along(scale.astype(np.float64), axis, rank), _along(zero.astype(np.float64), axis, rank)
    real = (weights.astype(np.float64) - z) * s
    if scale.size == 1:
        peak = np.abs(real).max(initial=0.0).reshape(scale.shape)
    else:
        others = tuple(d for d in range(rank) if d != axis % rank)
        peak = np.abs(real).max(axis=others, initial=0.0).reshape(scale.shape)
    declared = symmetric_scale(scale, zero).astype(np.float64)
    new_scale = np.where(peak > 0, np.minimum(peak / 127, declared), declared).astype(scale.dtype)
    q = np.clip(np.round(real / _along(new_scale.astype(np.float64), axis, rank)), -127, 127).astype(I8)
    return q, new_scale


def _saturated(x: gs.Tensor, scale: np.ndarray, zero: np.ndarray, ctx: Context) -> gs.Tensor:
    """``x`` clipped to the original range [s (qmin - z), s (qmax - z)]: the asymmetric QuantizeLinear
    saturates there, and the symmetric range is wider on one side (a value above the calibrated
    maximum would otherwise pass where the model clamps it)."""
    if scale.size != 1:
        raise Skip("per-channel activation quantization is not re-quantized")
    qmin, qmax = RANGES[zero.dtype]
    s, z = float(scale.reshape(())), float(zero.reshape(()))
    dtype = tensor_dtype(x) or np.dtype(np.float32)
    lo, hi = np.asarray(s * (qmin - z), dtype), np.asarray(s * (qmax - z), dtype)
    b = ctx.builder
    if ctx.opset < 11:
        return b.op("Clip", [x], {"min": float(lo), "max": float(hi)}, dtype=dtype)
    return b.op("Clip", [x, b.const(lo, hint="low"), b.const(hi, hint="high")], dtype=dtype)


def rewrite(node: gs.Node, ctx: Context) -> None:
    if int(node.attrs.get("block_size", 0) or 0):
        raise Skip("blocked quantization (block_size) is not re-quantized")
    b = ctx.builder
    scale, zero = _quantization(node, ctx)
    axis = int(node.attrs.get("axis", 1))
    attrs = {k: v for k, v in node.attrs.items() if k != "output_dtype"}
    if node.op == "DequantizeLinear":
        weights = _known(node.inputs[0], ctx)
        if weights is None:
            raise Skip(f"its input '{node.inputs[0].name}' is neither constant weights nor a QuantizeLinear's output")
        q, new_scale = requantized_weights(weights, scale, zero, axis)
        replace_tensor(ctx.graph, node.outputs[0], b.op(
            "DequantizeLinear", [b.const(q, hint="symmetric_weights"), b.const(new_scale, hint="symmetric_scale"),
                                 b.const(_zeros(zero), hint="zero_point")], attrs, dtype=node.outputs[0].dtype))
        return
    readers = _dequantizers(node, scale, zero, ctx)
    new_scale = b.const(symmetric_scale(scale, zero), hint="symmetric_scale")
    quantized = b.op("QuantizeLinear", [_saturated(node.inputs[0], scale, zero, ctx), new_scale,
                                        b.const(_zeros(zero), hint="zero_point")], attrs, dtype=I8)
    moved = {}
    for via, reader in readers:
        source = quantized
        if via is not None:
            if id(via) not in moved:
                moved[id(via)] = b.op(via.op, [quantized, *via.inputs[1:]], dict(via.attrs), dtype=I8)
            source = moved[id(via)]
        replace_tensor(ctx.graph, reader.outputs[0], b.op(
            "DequantizeLinear", [source, new_scale, b.const(_zeros(zero), hint="zero_point")], dict(reader.attrs),
            dtype=reader.outputs[0].dtype))


def _dequantizers(node: gs.Node, scale: np.ndarray, zero: np.ndarray, ctx: Context) -> list[tuple[gs.Node | None, gs.Node]]:
    """The DequantizeLinear nodes that read a QuantizeLinear's integers (each with the
    :data:`PASSTHROUGH` op it reads them through, or None): all of them must have its scale and
    zero point, or the integers are read as integers and are left as they are."""
    found: list[tuple[gs.Node | None, gs.Node]] = []

    def same(reader: gs.Node, t: gs.Tensor) -> bool:
        theirs = _quantization(reader, ctx) if reader.op == "DequantizeLinear" and reader.inputs[0] is t else None
        return theirs is not None and np.array_equal(theirs[0], scale) and np.array_equal(theirs[1], zero) \
            and reader.attrs.get("axis", 1) == node.attrs.get("axis", 1)

    out = node.outputs[0]
    if out in ctx.graph.outputs or not out.outputs:
        raise Skip("its integer output is a graph output: the model's interface keeps it")
    for reader in out.outputs:
        if same(reader, out):
            found.append((None, reader))
            continue
        moved = reader.outputs[0] if reader.op in PASSTHROUGH and reader.inputs[0] is out else None
        if moved is not None and moved not in ctx.graph.outputs and moved.outputs \
                and all(not t.outputs and t not in ctx.graph.outputs for t in reader.outputs[1:]) \
                and all(same(r, moved) for r in moved.outputs):
            found += [(reader, r) for r in moved.outputs]
            continue
        raise Skip(f"its output is read by {reader.op} '{reader.name}', not only by DequantizeLinear of the same scale and "
                   f"zero point (directly or through {'/'.join(sorted(PASSTHROUGH))})")
    return found


PASS = Pass(
    name="requantize-symmetric",
    summary="Opt-in, not exact: asymmetric INT8/UINT8 Q/DQ as symmetric INT8 (zero point 0) covering the same range; "
            "constant weights re-quantized.",
    ops=frozenset({"QuantizeLinear", "DequantizeLinear"}),
    rules=(
        Rule(LIMIT, ">=8.0", "asymmetric Q/DQ (zero point not 0): TensorRT supports symmetric INT8 quantization only",
             _asymmetric_qdq, evidence=_SOURCE),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    exact=False,
)
