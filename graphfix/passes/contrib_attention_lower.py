"""contrib-attention-lower: onnxruntime's fused ``com.microsoft`` Attention, MultiHeadAttention, GroupQueryAttention as MatMul / Softmax / MatMul.

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

``GroupQueryAttention`` (what onnxruntime's model builder / genai and the optimizer write for
Llama/Mistral/Qwen/Phi decoders; schema and measured behaviour of onnxruntime 1.32's CPU kernel):

* Q ``[B, S, N*H]``, K/V ``[B, S, kvN*H]``, or one packed QKV ``[B, S, (N + 2 kvN) H]``; each run
  of N/kvN query heads reads one KV head (one grouped MatMul, K/V not repeated).
* ``seqlens_k[b] + 1 = T[b]`` tokens after the step; ``cached[b] = max(T[b] - S, 0)`` before it
  (the first prompt, ``total_sequence_length = S``, caches none and ``T[b] < S`` is right padding).
  Query row s sits at position ``cached[b] + s`` and sees keys ``j <= position`` and ``j < T[b]``
  (``causal=0``: every ``j < T[b]``); with ``local_window_size`` W only the W keys ending at its
  position.
* ``present_key``/``present_value`` are ``max(past length, total_sequence_length)`` long (a
  past buffer longer than the total is a static / shared cache): per entry the first
  ``cached[b]`` past rows, the S new ones, then zeros (measured: whatever the past buffer held
  there), built with one GatherElements and a Where; attention reads the first
  ``total_sequence_length`` rows.
* ``do_rotary``: Q and the new K rotated at their positions by ``cos_cache``/``sin_cache``
  (``rotary_interleaved``, a partial rotary dim from the caches' width), before the cache; a
  ``position_ids`` input gives the positions after the first prompt, and in it (S =
  ``total_sequence_length``) only ``position_ids[0, 0]`` counts: ``position_ids[0, 0] + s`` for
  every entry (measured);
  ``scale``, ``softcap`` (``softcap * tanh(scores / softcap)``), then ``attention_bias``.
* A padded prompt row (s >= T[b]) has no specified output; the lowering reproduces the CPU
  kernel's two code paths (float32 without softcap ends its window at s and writes zeros where
  no key is left; float16 or softcap ends it at T[b] - 1), measured.

Cost (``bench/contrib_latency.py``, onnxruntime CPU, 1 thread, lowered / native, three runs):
Attention (12 heads, hidden 768, padding mask) 0.97-1.09x at sequence 128, 1.01-1.07x at 512;
MultiHeadAttention 0.89-1.12x / 0.99-1.19x; GroupQueryAttention (12 over 4 heads, rotary) a
128-token prompt 1.31-1.33x, one decoding step after 511 cached tokens 1.15-1.43x (the present
buffer as one row Gather; a GatherElements + Where form cost 4.7x).

Left out (findings): packed QKV / KV and 4-D key/value forms of MultiHeadAttention, its ``qk``
output, ``past_sequence_length``/``cache_indirection``; Attention's ``do_rotary``,
``past_present_share_buffer``, a ``past_sequence_length`` input, a 4-D (Megatron) mask; weights
whose shape is not static, non-float inputs. GroupQueryAttention:
``sliding_window_cache`` (a window-sized cache evicting internally), ``smooth_softmax``/``head_sink``,
a quantized KV cache (``k_scale``/``v_scale``, ``k_quant_type``/``v_quant_type``, int8/uint8/fp8
past), ``q_norm_weight``/``k_norm_weight``, ``query_seqlens``, the ``output_qk`` output
(``qk_output``), bfloat16; onnxruntime's CPU kernel wants a head size that is a multiple
of 8 (16 with rotary), so no other head size was measured.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, is_read, optional_input, replace_tensor, static_shape, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._contrib import NO_CONTRIB_IMPORTER, float_type, replace_typed
from graphfix.passes._rotary import rotate_heads
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


def _regroup(b: Builder, x: gs.Tensor, heads: int, groups: int) -> gs.Tensor:
    """[B, H, R, D] as [B, heads, H * R / heads, D]: with ``heads`` = N / groups, each run of
    ``groups`` query heads n = kv * groups + i becomes one block of rows; with ``heads`` = N, back."""
    return x if groups == 1 else b.reshape(x, np.array([0, heads, -1, 0], np.int64))


def _scores(b: Builder, q: gs.Tensor, k: gs.Tensor, scale: float, dtype: np.dtype, heads: int = 0, groups: int = 1) -> gs.Tensor:
    """``scale * Q K^T`` for Q [B, heads, S, head] and K [B, heads / groups, T, head]: each run of
    ``groups`` query heads reads one key head (grouped-query attention) in one MatMul."""
    qk = b.op("MatMul", [_regroup(b, q, heads // groups, groups), b.transpose(k, [0, 1, 3, 2])])
    return b.op("Mul", [_regroup(b, qk, heads, groups), np.array(scale, dtype)])


def _mix(ctx: Context, scores: gs.Tensor, v: gs.Tensor, hv: int, heads: int = 0, groups: int = 1) -> gs.Tensor:
    """Softmax over the keys, ``@ V`` (V [B, heads / groups, T, hv / heads]), heads merged to [B, S, hv]."""
    b = ctx.builder
    probs = b.op("Softmax", [scores], {"axis": -1} if ctx.opset >= 13 else {"axis": 3})
    out = _regroup(b, b.op("MatMul", [_regroup(b, probs, heads // groups, groups), v]), heads, groups)
    return b.reshape(b.transpose(out, [0, 2, 1, 3]), np.array([0, 0, hv], np.int64))


def _attend(ctx: Context, node: gs.Node, q: gs.Tensor, k: gs.Tensor, v: gs.Tensor, x: gs.Tensor, mask: gs.Tensor | None,
            attention_bias: gs.Tensor | None, head: int, hv: int, dtype: np.dtype) -> gs.Tensor:
    """Softmax(scale * Q K^T + masks + bias) V for Q/K/V [B, N, *, head], merged to [B, S, hv]."""
    b, attrs = ctx.builder, node.attrs
    scale = attrs.get("scale")
    scores = _scores(b, q, k, float(scale) if scale is not None else 1.0 / float(np.sqrt(head)), dtype)
    filter_value = float(attrs.get("mask_filter_value", DEFAULT_MASK_FILTER))
    q_len, total = b.slice(b.shape(q), [2], [3], [0]), b.slice(b.shape(k), [2], [3], [0])
    if mask is not None:
        keep = _key_mask(b, mask, x, total)
        scores = b.op("Add", [scores, _penalty(b, b.op("Not", [keep], dtype=np.bool_), filter_value, dtype)])
    if int(attrs.get("unidirectional", 0)):  # a later key is out whatever the mask says: the type's lowest value
        scores = b.op("Where", [_causal(b, q_len, total), np.array(np.finfo(dtype).min, dtype), scores], dtype=dtype)
    if attention_bias is not None:
        scores = b.op("Add", [scores, attention_bias])
    return _mix(ctx, scores, v, hv)


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
    if len(node.outputs) > 3 and is_read(node.outputs[3], ctx.graph):
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
        if len(node.outputs) > index and is_read(node.outputs[index], ctx.graph):
            replace_tensor(ctx.graph, node.outputs[index], tensor)


#: GroupQueryAttention's inputs past the ones lowered, by index: what each one is.
_GQA_REFUSED_INPUTS = {11: "head_sink", 12: "k_scale (a quantized KV cache)",
                       13: "v_scale (a quantized KV cache)", 14: "q_norm_weight", 15: "k_norm_weight",
                       16: "query_seqlens (right-padded query chunks)"}


def _gqa_refusals(node: gs.Node, ctx: Context) -> None:
    attrs = node.attrs
    for name in ("sliding_window_cache", "smooth_softmax", "qk_output"):
        if int(attrs.get(name, 0)) > 0:
            raise Skip(f"{name}={int(attrs[name])} is not lowered")
    for name in ("k_quant_type", "v_quant_type"):
        kind = attrs.get(name, "NONE")
        if (kind.decode() if isinstance(kind, bytes) else str(kind)) != "NONE":
            raise Skip(f"{name}={kind} (a quantized KV cache) is not lowered")
    for index, what in _GQA_REFUSED_INPUTS.items():
        if optional_input(node, index) is not None:
            raise Skip(f"{what} is not lowered")
    if len(node.outputs) > 3 and is_read(node.outputs[3], ctx.graph):
        raise Skip("the output_qk output is read")
    if not int(attrs.get("causal", 1)) and int(attrs.get("local_window_size", -1)) > 0:
        raise Skip("local_window_size with causal=0 (onnxruntime refuses it)")


def _gqa_qkv(node: gs.Node, b: Builder, heads: int, kv_heads: int) -> tuple[gs.Tensor, gs.Tensor, gs.Tensor, int]:
    """Q [B, N, S, H], K and V [B, kvN, S, H] from separate or packed inputs, and H."""
    query, key, value = node.inputs[0], optional_input(node, 1), optional_input(node, 2)
    width = query.shape[2] if query.shape is not None and len(query.shape) == 3 else None
    if not isinstance(width, (int, np.integer)):
        raise Skip("the query must be 3-D with a static hidden size")
    if key is None and value is None:  # packed QKV [B, S, (N + 2 kvN) H]
        head, rest = divmod(int(width), heads + 2 * kv_heads)
        if rest:
            raise Skip(f"packed QKV width {width} is not (num_heads + 2 kv_num_heads) * head_size")
        nq, nkv = heads * head, kv_heads * head
        query, key, value = (b.slice(query, [lo], [lo + n], [2]) for lo, n in ((0, nq), (nq, nkv), (nq + nkv, nkv)))
    elif key is not None and value is not None:
        head = int(width) // heads
        if int(width) % heads or any(t.shape is None or len(t.shape) != 3 or t.shape[2] != kv_heads * head for t in (key, value)):
            raise Skip("query/key/value hidden sizes are not num_heads / kv_num_heads heads of one static size")
    else:
        raise Skip("only one of key/value is given")
    return (_heads(b, query, heads, heads * head), _heads(b, key, kv_heads, kv_heads * head),
            _heads(b, value, kv_heads, kv_heads * head), head)


def _cache(b: Builder, past: gs.Tensor, new: gs.Tensor, cached: gs.Tensor, q_len: gs.Tensor, length: gs.Tensor,
           kv_heads: int, head: int, dtype: np.dtype) -> gs.Tensor:
    """The present buffer [B, kvN, length, H] the CPU kernel writes: entry b's first ``cached[b]``
    rows of ``past``, then the S new rows, then zeros (measured on onnxruntime 1.32: the rows after
    the new ones are zero whatever the past buffer held there). One Gather of H-wide rows from
    [past, new, one zero row] flattened: a per-entry offset needs no scatter, and a row Gather
    costs a third of GatherElements + Where on onnxruntime (bench/contrib_latency.py)."""
    zero, one = np.array(0, np.int64), np.array(1, np.int64)
    shape = b.shape(past)
    batch, past_len = b.slice(shape, [0], [1], [0]), b.slice(shape, [2], [3], [0])
    zeros = b.op("Expand", [np.zeros((1, 1, 1, 1), dtype), b.concat([batch, np.array([kv_heads, 1, head], np.int64)], 0)],
                 dtype=dtype)
    source = b.concat([past, new, zeros], 2)  # [B, kvN, R, H], R = P + S + 1
    width = b.op("Add", [b.op("Add", [past_len, q_len]), one])  # R
    rows = b.unsqueeze(b.op("Range", [zero, b.squeeze(length, [0]), one]), [0])  # [1, L]
    cached = b.unsqueeze(cached, [1])  # [B, 1]
    from_new = b.op("Add", [b.op("Sub", [rows, cached]), past_len])  # new row j - cached[b], after the past buffer
    after = b.op("Less", [rows, b.op("Add", [cached, q_len])], dtype=np.bool_)
    from_new = b.op("Where", [after, from_new, b.op("Add", [past_len, q_len])])  # then the zero row
    index = b.op("Where", [b.op("Less", [rows, cached], dtype=np.bool_), rows, from_new])  # [B, L]
    entries = b.op("Range", [zero, b.squeeze(batch, [0]), one])
    starts = b.op("Add", [b.unsqueeze(b.op("Mul", [entries, np.array(kv_heads, np.int64)]), [1]),
                          np.arange(kv_heads, dtype=np.int64)[None]])  # [B, kvN]: (b * kvN + n)
    index = b.op("Add", [b.unsqueeze(b.op("Mul", [starts, width]), [2]), b.unsqueeze(index, [1])])  # [B, kvN, L]
    return b.op("Gather", [b.reshape(source, np.array([-1, head], np.int64)), index], {"axis": 0}, dtype=dtype)


def _group_query(node: gs.Node, ctx: Context) -> None:
    """GroupQueryAttention: Q/K/V (or packed QKV), optional past buffers, seqlens_k, total length."""
    _gqa_refusals(node, ctx)
    if ctx.opset < 11:
        raise Skip(f"opset {ctx.opset} has no Range (11)")
    attrs, b = node.attrs, ctx.builder
    dtype = float_type(node, 0, 1, 2, 3, 7)
    heads, kv_heads = int(attrs.get("num_heads", 0)), int(attrs.get("kv_num_heads", 0))
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise Skip(f"num_heads={heads} is not a multiple of kv_num_heads={kv_heads}")
    past_key, past_value = optional_input(node, 3), optional_input(node, 4)
    if (past_key is None) != (past_value is None):
        raise Skip("only one of past_key/past_value is given")
    if past_key is not None and any(tensor_dtype(t) not in (None, dtype) for t in (past_key, past_value)):
        raise Skip("the KV cache is quantized (its type is not the query's)")
    q, k, v, head = _gqa_qkv(node, b, heads, kv_heads)
    # entry b holds T[b] = seqlens_k[b] + 1 tokens after the step, cached[b] = max(T[b] - S, 0) before
    # it (the first prompt, S = total_sequence_length, caches none: T[b] < S is right padding)
    seqlens, total = b.cast(node.inputs[5], np.int64), b.reshape(b.cast(node.inputs[6], np.int64), np.array([1], np.int64))
    tokens = b.op("Add", [seqlens, np.array(1, np.int64)])
    q_len = b.slice(b.shape(q), [2], [3], [0])
    cached = b.max(b.op("Sub", [tokens, q_len]), np.array(0, np.int64))
    cached_rows = b.unsqueeze(cached, [1])
    positions = b.op("Add", [cached_rows, b.unsqueeze(b.op("Range", [np.array(0, np.int64), b.squeeze(q_len, [0]),
                                                                    np.array(1, np.int64)]), [0])])  # [B, S]
    if int(attrs.get("do_rotary", 0)):
        position_ids, rotary_at = optional_input(node, 9), positions
        if position_ids is not None:  # the first prompt (S = total) reads position_ids[0, 0] + s (measured)
            position_ids = b.cast(position_ids, np.int64)
            start = b.op("Add", [b.slice(position_ids, [0, 0], [1, 1], [0, 1]), b.op("Sub", [positions, cached_rows])])
            first = b.op("Equal", [q_len, total], dtype=np.bool_)
            rotary_at = b.op("Where", [first, start, position_ids])
        cos, sin = optional_input(node, 7), optional_input(node, 8)
        half = cos.shape[1] if cos is not None and cos.shape is not None and len(cos.shape) == 2 else None
        if sin is None or not isinstance(half, (int, np.integer)):
            raise Skip("do_rotary=1 without cos_cache/sin_cache of static shape [max_len, rotary_dim / 2]")
        interleaved = bool(attrs.get("rotary_interleaved", 0))
        q, k = (rotate_heads(b, t, head, cos, sin, rotary_at, 2 * int(half), interleaved, dtype, 1) for t in (q, k))
    if past_key is not None:  # the present buffer is max(past buffer, total) long (a shared/static cache when past is longer)
        length = b.max(b.slice(b.shape(past_key), [2], [3], [0]), total)
        k, v = (_cache(b, past, new, cached, q_len, length, kv_heads, head, dtype) for past, new in ((past_key, k), (past_value, v)))
        keys_k, keys_v = b.slice(k, [0], total, [2]), b.slice(v, [0], total, [2])  # no valid key lies past total
    else:
        keys_k, keys_v = k, v
    scale = attrs.get("scale")
    scale = float(scale) if scale is not None and float(scale) != 0 else 1.0 / float(np.sqrt(head))
    groups = heads // kv_heads
    scores = _scores(b, q, keys_k, scale, dtype, heads, groups)
    softcap = float(attrs.get("softcap", 0.0))
    if softcap > 0:
        scores = b.op("Mul", [b.op("Tanh", [b.op("Div", [scores, np.array(softcap, dtype)])]), np.array(softcap, dtype)])
    attention_bias = optional_input(node, 10)
    if attention_bias is not None:
        scores = b.op("Add", [scores, attention_bias])
    hidden, empty = _gqa_hidden(b, positions, tokens, keys_k, int(attrs.get("local_window_size", -1)), softcap > 0 or dtype != np.float32,
                                bool(int(attrs.get("causal", 1))))
    scores = b.op("Where", [hidden, np.array(np.finfo(dtype).min, dtype), scores], dtype=dtype)
    out = _mix(ctx, scores, keys_v, heads * head, heads, groups)
    if empty is not None:
        out = b.op("Where", [empty, np.array(0, dtype), out], dtype=dtype)
    replace_tensor(ctx.graph, node.outputs[0], out)
    for index, tensor in ((1, k), (2, v)):
        if len(node.outputs) > index and is_read(node.outputs[index], ctx.graph):
            replace_tensor(ctx.graph, node.outputs[index], tensor)


def _gqa_hidden(b: Builder, positions: gs.Tensor, tokens: gs.Tensor, keys: gs.Tensor, window: int,
                clamp: bool, causal: bool = True) -> tuple[gs.Tensor, gs.Tensor | None]:
    """True where key j is out of query (b, s)'s reach, [B, 1, S, T]: after its position
    ``cached[b] + s`` (``causal``), at or past ``T[b]`` (a padded prompt's rows), or, with a local
    window W, not among the W keys ending at that position; and, where a row can see no key at
    all, True for it ([B, S, 1], else None). A padded prompt row (s >= T[b]) has no specified
    output; onnxruntime 1.32's CPU kernel ends its window at s in float32 without softcap (no key
    left when s - W + 1 >= T[b]: the row is zeros), at T[b] - 1 (``clamp``) with softcap or in
    float16 (another code path; measured), and so does this mask."""
    keys_len = b.squeeze(b.slice(b.shape(keys), [2], [3], [0]), [0])
    cols = b.unsqueeze(b.op("Range", [np.array(0, np.int64), keys_len, np.array(1, np.int64)]), [0, 1])  # [1, 1, T]
    at, tokens = b.unsqueeze(positions, [2]), b.unsqueeze(tokens, [1, 2])  # [B, S, 1], [B, 1, 1]
    hidden = b.op("Not", [b.op("Less", [cols, tokens], dtype=np.bool_)], dtype=np.bool_)
    if causal:
        hidden = b.op("Or", [b.op("Greater", [cols, at], dtype=np.bool_), hidden], dtype=np.bool_)
    if window > 0:
        if clamp:
            last = b.op("Sub", [tokens, np.array(1, np.int64)])
            at = b.op("Where", [b.op("Less", [at, last], dtype=np.bool_), at, last])
        first = b.op("Sub", [at, np.array(window - 1, np.int64)])
        hidden = b.op("Or", [hidden, b.op("Less", [cols, first], dtype=np.bool_)], dtype=np.bool_)
        if not clamp:
            return b.unsqueeze(hidden, [1]), b.op("Not", [b.op("Less", [first, tokens], dtype=np.bool_)], dtype=np.bool_)
    return b.unsqueeze(hidden, [1]), None


def rewrite(node: gs.Node, ctx: Context) -> None:
    if node.op == "GroupQueryAttention":
        _group_query(node, ctx)
        return
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
    if len(node.outputs) > 1 and is_read(node.outputs[1], ctx.graph):
        if past is None:
            raise Skip("present is read but there is no past (onnxruntime requires both)")
        replace_tensor(ctx.graph, node.outputs[1], b.concat([b.unsqueeze(k, [0]), b.unsqueeze(v, [0])], 0))


PASS = Pass(
    name="contrib-attention-lower",
    summary="Lower onnxruntime's com.microsoft Attention (packed QKV, masks, past/present), MultiHeadAttention (3-D Q/K/V) and "
            "GroupQueryAttention (KV heads, past/present, seqlens_k, window, softcap, rotary) to MatMul/Softmax/MatMul.",
    ops=frozenset({"Attention", "MultiHeadAttention", "GroupQueryAttention"}),
    rules=(
        Rule(NO_IMPORTER, "all", "onnxruntime contrib Attention (packed QKV weights): no TensorRT importer",
             ops=frozenset({"Attention"}), error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
        Rule(NO_IMPORTER, "all", "onnxruntime contrib MultiHeadAttention: no TensorRT importer",
             ops=frozenset({"MultiHeadAttention"}), error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
        Rule(NO_IMPORTER, "all", "onnxruntime contrib GroupQueryAttention: no TensorRT importer",
             ops=frozenset({"GroupQueryAttention"}), error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    domains=frozenset({"com.microsoft"}),
)
