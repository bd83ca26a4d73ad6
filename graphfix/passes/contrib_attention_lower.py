"""contrib-attention-lower: onnxruntime's fused ``com.microsoft`` Attention as MatMul / Softmax / MatMul.

Why: onnxruntime's transformer optimizer (``optimize_model(model_type="bert" | "gpt2" | "vit")``,
optimum's O1-O4) fuses each self-attention block, QKV projection included, into one
``com.microsoft`` ``Attention`` node. No TensorRT release imports it: the parser looks importers
up by op type, domain ignored (``ModelImporter.cpp``), and its ``Attention`` importer (from the
opset-23 ONNX op, if any) expects the ONNX op's inputs (Q, K, V), not onnxruntime's packed
weights; before that the plugin fallback finds nothing ("Plugin not found").

How (onnxruntime's ContribOperators.md and the schema it registers; the CPU kernel's mask
handling, ``attention_helper.h`` / ``attention_cpu_base.h``):

* ``QKV = input @ weights (+ bias)``, split into Q, K, V by ``qkv_hidden_sizes`` (thirds by
  default), each ``[B, S, N, head]`` moved to ``[B, N, S, head]``.
* ``past`` ``[2, B, N, P, head]``: its K and V are put before the new ones; ``present`` is both,
  stacked again.
* ``scores = scale * Q @ K^T`` (``scale`` 1/sqrt(head) by default) plus the mask the kernel builds:
  ``mask_filter_value`` (default -10000) where ``mask_index`` masks a key — a raw 0/1 mask
  ``[B, T]`` or ``[B, S, T]`` (0 masks), right-padding lengths ``[B]`` (keys at or past the length),
  or end/start positions ``[2B]`` —, and the type's lowest value where ``unidirectional`` hides a
  later key (onnxruntime 1.32's CPU kernel excludes such keys whatever the mask: measured, a row
  whose earlier keys are all padding still attends to them only), plus ``attention_bias``.
* ``Softmax`` over the keys, ``@ V``, heads merged back to ``[B, S, v_hidden]``.

``MultiHeadAttention`` (separate 3-D query/key/value, the kind the optimizer writes for
cross-attention and for decoders with ``past_key``/``past_value``) goes the same way: its ``bias``
is the Q, K and V biases one after another, ``key_padding_mask`` a raw ``[B, T]`` mask or lengths
``[B]``, ``present_key``/``present_value`` the keys and values after the past ones.

Left out (findings): packed QKV / KV and 4-D key/value forms of MultiHeadAttention, its ``qk``
output, ``past_sequence_length``/``cache_indirection``; ``do_rotary``, ``past_present_share_buffer``, a ``past_sequence_length``
input, a 4-D (Megatron) mask, weights whose shape is not static, non-float inputs.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, optional_input, replace_tensor, static_shape, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._contrib import NO_CONTRIB_IMPORTER, float_type, microsoft, replace_typed, used
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule

DEFAULT_MASK_FILTER = -10000.0


def _sizes(node: gs.Node, weights: gs.Tensor, heads: int) -> tuple[int, int, int]:
    shape = static_shape(weights)
    if shape is None or len(shape) != 2:
        raise Skip("the packed QKV weights' shape is not static")
    sizes = [int(v) for v in node.attrs.get("qkv_hidden_sizes", [])] or [shape[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != shape[1] or any(s <= 0 or s % heads for s in sizes):
        raise Skip(f"qkv_hidden_sizes {sizes} do not split weights of width {shape[1]} into {heads} heads")
    return sizes[0], sizes[1], sizes[2]


def _heads(b: Builder, x: gs.Tensor, heads: int, size: int) -> gs.Tensor:
    """[B, S, heads * size] -> [B, heads, S, size]."""
    return b.transpose(b.reshape(x, np.array([0, 0, heads, size // heads], np.int64)), [0, 2, 1, 3])


def _key_mask(b: Builder, mask: gs.Tensor, x: gs.Tensor, total: gs.Tensor) -> gs.Tensor:
    """True where a key is visible, broadcastable to [B, N, S, T]."""
    rank = len(mask.shape) if mask.shape is not None else None
    if rank in (2, 3):
        keep = b.op("Greater", [mask, np.array(0, tensor_dtype(mask) or np.int32)], dtype=np.bool_)
        return b.unsqueeze(keep, [1, 2] if rank == 2 else [1])
    if rank != 1:
        raise Skip(f"mask_index of rank {rank} is not lowered (raw [B, T] / [B, S, T] masks and 1-D positions are)")
    # [B] ends, or [2B] ends then starts, told apart at run time as the kernel does: the starts are
    # what follows the first B values, padded with zeros (no start) when there is nothing
    dtype = tensor_dtype(mask) or np.dtype(np.int32)
    batch = b.slice(b.shape(x), [0], [1], [0])
    end = b.slice(mask, [0], batch, [0])
    padded = b.concat([mask, b.op("Mul", [end, np.array(0, dtype)])], 0)
    start = b.slice(padded, batch, b.op("Add", [batch, batch]), [0])
    keys = b.cast(b.op("Range", [np.array(0, np.int64), b.squeeze(total, [0]), np.array(1, np.int64)]), dtype)
    before_end = b.op("Less", [keys, b.unsqueeze(end, [1])], dtype=np.bool_)
    after_start = b.op("Not", [b.op("Less", [keys, b.unsqueeze(start, [1])], dtype=np.bool_)], dtype=np.bool_)
    return b.unsqueeze(b.op("And", [before_end, after_start], dtype=np.bool_), [1, 2])


def _causal(b: Builder, q_len: gs.Tensor, total: gs.Tensor) -> gs.Tensor:
    """True where key j lies after query i (j > past + i), [S, T]."""
    zero, one = np.array(0, np.int64), np.array(1, np.int64)
    rows = b.unsqueeze(b.op("Range", [zero, b.squeeze(q_len, [0]), one]), [1])
    cols = b.unsqueeze(b.op("Range", [zero, b.squeeze(total, [0]), one]), [0])
    past = b.op("Sub", [total, q_len])
    return b.op("Greater", [cols, b.op("Add", [rows, past])], dtype=np.bool_)


def _penalty(b: Builder, hidden: gs.Tensor, value: float, dtype: np.dtype) -> gs.Tensor:
    """``value`` where ``hidden`` is true, 0 elsewhere (a filter value beyond the type's range, as
    optimum writes float32's lowest into fp16 models, is the type's lowest)."""
    value = max(value, float(np.finfo(dtype).min))
    return b.op("Where", [hidden, np.array(value, dtype), np.array(0, dtype)], dtype=dtype)


def _attend(ctx: Context, node: gs.Node, q: gs.Tensor, k: gs.Tensor, v: gs.Tensor, x: gs.Tensor, mask: gs.Tensor | None,
            attention_bias: gs.Tensor | None, head: int, hv: int, dtype: np.dtype) -> gs.Tensor:
    """Softmax(scale * Q K^T + masks + bias) V for Q/K/V [B, N, *, head], merged to [B, S, hv]."""
    b, attrs = ctx.builder, node.attrs
    scale = attrs.get("scale")
    scale = float(scale) if scale is not None else 1.0 / float(np.sqrt(head))
    scores = b.op("Mul", [b.op("MatMul", [q, b.transpose(k, [0, 1, 3, 2])]), np.array(scale, dtype)])
    filter_value = float(attrs.get("mask_filter_value", DEFAULT_MASK_FILTER))
    q_len, total = b.slice(b.shape(q), [2], [3], [0]), b.slice(b.shape(k), [2], [3], [0])
    if mask is not None:
        keep = _key_mask(b, mask, x, total)
        scores = b.op("Add", [scores, _penalty(b, b.op("Not", [keep], dtype=np.bool_), filter_value, dtype)])
    if int(attrs.get("unidirectional", 0)):  # a later key is out whatever the mask says: the type's lowest value
        scores = b.op("Where", [_causal(b, q_len, total), np.array(np.finfo(dtype).min, dtype), scores], dtype=dtype)
    if attention_bias is not None:
        scores = b.op("Add", [scores, attention_bias])
    probs = b.op("Softmax", [scores], {"axis": -1} if ctx.opset >= 13 else {"axis": 3})
    out = b.transpose(b.op("MatMul", [probs, v]), [0, 2, 1, 3])
    return b.reshape(out, np.array([0, 0, hv], np.int64))


def _hidden_sizes(q: gs.Tensor, k: gs.Tensor, v: gs.Tensor, bias: gs.Tensor | None) -> tuple[int, int, int]:
    """Q/K/V hidden sizes: their static last dims, or (onnx's inference types nothing after another
    contrib op) thirds of the bias, which is the three biases one after another."""
    dims = [t.shape[2] if t.shape is not None else None for t in (q, k, v)]
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return int(dims[0]), int(dims[1]), int(dims[2])
    length = bias.shape[0] if bias is not None and bias.shape is not None and len(bias.shape) == 1 else None
    if isinstance(length, (int, np.integer)) and length % 3 == 0 and all(d in (None, length // 3) for d in dims):
        return (int(length) // 3,) * 3
    raise Skip("the query/key/value hidden sizes are not static (and there is no bias to read them from)")


def _multi_head(node: gs.Node, ctx: Context) -> None:
    """MultiHeadAttention with separate 3-D query/key/value ``[B, S|L, hidden]``."""
    if any(optional_input(node, i) is not None for i in (8, 9)):
        raise Skip("past_sequence_length / cache_indirection inputs are not lowered")
    if len(node.outputs) > 3 and used(node.outputs[3], ctx.graph):
        raise Skip("the qk output is read")
    q, k, v = node.inputs[0], optional_input(node, 1), optional_input(node, 2)
    if k is None or v is None or any(t.shape is not None and len(t.shape) != 3 for t in (q, k, v)):
        raise Skip("only separate 3-D query/key/value are lowered (not packed QKV/KV or 4-D key/value caches)")
    dtype = float_type(node, 0, 1, 2, 3)
    heads = int(node.attrs.get("num_heads", 0))
    hq, hk, hv = _hidden_sizes(q, k, v, optional_input(node, 3))
    if heads <= 0 or any(d % heads for d in (hq, hk, hv)):
        raise Skip(f"num_heads {heads} must divide the query/key/value hidden sizes {hq}/{hk}/{hv}")
    b = ctx.builder
    bias = optional_input(node, 3)
    if bias is not None:
        q = b.op("Add", [q, b.slice(bias, [0], [hq], [0])])
        k = b.op("Add", [k, b.slice(bias, [hq], [hq + hk], [0])])
        v = b.op("Add", [v, b.slice(bias, [hq + hk], [hq + hk + hv], [0])])
    q, k, v = _heads(b, q, heads, hq), _heads(b, k, heads, hk), _heads(b, v, heads, hv)
    past_key, past_value = optional_input(node, 6), optional_input(node, 7)
    if past_key is not None and past_value is not None:
        k, v = b.concat([past_key, k], 2), b.concat([past_value, v], 2)
    out = _attend(ctx, node, q, k, v, node.inputs[0], optional_input(node, 4), optional_input(node, 5), hq // heads, hv, dtype)
    replace_typed(ctx.graph, node.outputs[0], out, dtype)
    for index, tensor in ((1, k), (2, v)):
        if len(node.outputs) > index and used(node.outputs[index], ctx.graph):
            replace_tensor(ctx.graph, node.outputs[index], tensor)


def rewrite(node: gs.Node, ctx: Context) -> None:
    if node.op == "MultiHeadAttention":
        _multi_head(node, ctx)
        return
    attrs = node.attrs
    for unsupported in ("do_rotary", "past_present_share_buffer"):
        if int(attrs.get(unsupported, 0)):
            raise Skip(f"{unsupported}=1 is not lowered")
    if optional_input(node, 6) is not None:
        raise Skip("a past_sequence_length input is not lowered")
    x, weights = node.inputs[0], node.inputs[1]
    dtype = float_type(node, 0, 1, 2)
    heads = int(attrs.get("num_heads", 0))
    if heads <= 0:
        raise Skip(f"num_heads={heads}")
    hq, hk, hv = _sizes(node, weights, heads)
    b = ctx.builder
    qkv = b.op("MatMul", [x, weights])
    bias = optional_input(node, 2)
    if bias is not None:
        qkv = b.op("Add", [qkv, bias])
    q = _heads(b, b.slice(qkv, [0], [hq], [-1]), heads, hq)
    k = _heads(b, b.slice(qkv, [hq], [hq + hk], [-1]), heads, hk)
    v = _heads(b, b.slice(qkv, [hq + hk], [hq + hk + hv], [-1]), heads, hv)
    past = optional_input(node, 4)
    if past is not None:
        k = b.concat([b.squeeze(b.slice(past, [0], [1], [0]), [0]), k], 2)
        v = b.concat([b.squeeze(b.slice(past, [1], [2], [0]), [0]), v], 2)
    out = _attend(ctx, node, q, k, v, x, optional_input(node, 3), optional_input(node, 5), hq // heads, hv, dtype)
    replace_typed(ctx.graph, node.outputs[0], out, dtype)
    if len(node.outputs) > 1 and used(node.outputs[1], ctx.graph):
        if past is None:
            raise Skip("present is read but there is no past (onnxruntime requires both)")
        replace_tensor(ctx.graph, node.outputs[1], b.concat([b.unsqueeze(k, [0]), b.unsqueeze(v, [0])], 0))


PASS = Pass(
    name="contrib-attention-lower",
    summary="Lower onnxruntime's com.microsoft Attention (packed QKV, masks, past/present) and MultiHeadAttention (3-D Q/K/V) to MatMul/Softmax/MatMul.",
    ops=frozenset({"Attention", "MultiHeadAttention"}),
    rules=(
        Rule(NO_IMPORTER, "all", "onnxruntime contrib Attention (packed QKV weights): no TensorRT importer", microsoft,
             ops=frozenset({"Attention"}), error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
        Rule(NO_IMPORTER, "all", "onnxruntime contrib MultiHeadAttention: no TensorRT importer", microsoft,
             ops=frozenset({"MultiHeadAttention"}), error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    domains=frozenset({"com.microsoft"}),
)
