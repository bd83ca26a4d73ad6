"""attention-decompose: ONNX Attention (opset 23-25) as MatMul / Softmax / Where.

Why: ``torch.onnx.export(..., dynamo=True, opset_version=23)`` writes every
``F.scaled_dot_product_attention`` as one ``Attention`` node. Parsers before 10.14 have no
Attention importer ("No importer registered for op: Attention"; the operator tables list it from
10.14). The 10.14+ importer (``onnxOpImporters.cpp`` importAttention, ``AttentionHelpers.cpp``)
builds one ``IAttention`` layer and refuses or ignores what that layer cannot express:

* any output besides Y: "TensorRT only supports Attention nodes with one output" (a KV-cache
  step that uses the op's own cache lists present_key/present_value; NVIDIA/TensorRT#4738 on
  10.16. torch's exporter concatenates the cache outside the node instead);
* ``past_key``/``past_value``: "Setting past_key for the Attention node is not supported";
* ``softcap``, ``nonpad_kv_seqlen`` and the opset-25 ``left/right_window_size`` are not read
  at all (the layer would attend where the model does not);
* 3-D Q/K/V (``q_num_heads``/``kv_num_heads``) and masks of lower rank: the operator tables of
  10.14-11.1 say rank 4 (a later importer source reshapes both itself).

How (the op's definition, step by step; ``onnx.reference`` ``op_attention.py`` and onnxruntime's
CPU kernel agree with it):

* 3-D inputs: ``Reshape [0, 0, heads, -1]`` + ``Transpose [0, 2, 1, 3]``; Y back the same way.
* ``past_key``/``past_value``: ``Concat`` on the sequence axis; that is present_key/present_value.
* ``Q * sqrt(scale)`` and ``K * sqrt(scale)`` (scale default ``1/sqrt(head_size)``, computed in
  float64 and rounded once, or from ``Shape`` when the head size is dynamic), then
  ``MatMul(Q, Transpose(K))``; ``softcap``: ``c * Tanh(x / c)``.
* grouped-query heads (q heads a multiple of kv heads): K and V are ``Unsqueeze``d, ``Expand``ed
  by the group size and ``Reshape``d to ``[B, q_heads, S, D]`` (head ``h`` reads kv head
  ``h // group``, as the op specifies); no weights are copied.
* the additive bias: a boolean ``attn_mask`` as ``Where(mask, 0, -inf)``, a float one as it is,
  a mask shorter than the key sequence padded with ``-inf`` (``Concat``); ``is_causal`` (key ``j``
  visible to query ``i`` iff ``j <= i + offset``: offset = past length, or per batch
  ``nonpad_kv_seqlen - q_len`` at opset 24+, else 0), the opset-25 sliding window and
  ``nonpad_kv_seqlen`` (keys ``j >= nonpad[b]`` hidden) as one boolean from ``Range`` indices
  (constants when the lengths are static), applied with ``Where(allowed, 0, -inf)`` and ``Add``.
* ``Softmax`` on the last axis (max-subtracted in every runtime), in ``softmax_precision`` if it
  differs; a row whose bias is ``-inf`` everywhere (fully masked: all-False mask, negative
  offset, empty window) is set to 0 with ``Where``, as the spec's errata and onnxruntime do
  (softmax alone would give NaN there). The row test is ``max(bias) == -inf``, the max a
  ``TopK(K=1)`` (an opset-18 ReduceMax's axes are ignored before 10.0); it is built only when a
  row can be empty (a mask, ``nonpad_kv_seqlen`` or a window: causal alone always leaves key 0).
* ``qk_matmul_output`` per ``qk_matmul_output_mode``: 0 the raw product (before softcap, as the
  spec and onnxruntime say; onnx's reference returns it after softcap), 1 after softcap, 2 with
  the bias, 3 the guarded probabilities in Q's type.

Cost (``bench/attention_latency.py``, onnxruntime CPU, 1 thread, Q/K/V (1, 8, 512, 64) fp32, a
shared and noisy machine): is_causal 1.05x the native op (a constant position bias, 11 nodes);
with a BOOL mask 1.2x (the row guard's TopK and Where).

On 10.14+ (``--trt``) a node the importer takes (one output, rank 4, none of the above) is kept:
TensorRT's fused attention is faster than the decomposition.

bfloat16 Q/K/V (and masks, caches) are cast to float32, decomposed there and the outputs cast
back (numpy has no bfloat16 for the constants; within one bfloat16 rounding of the op's cases).

Left out (findings): unknown Q rank, V of another type than Q, query heads not a multiple of
the key/value heads, a bfloat16 ``softmax_precision`` on fp16/fp32/fp64 Q, attributes outside
the op's definition (``is_causal`` other than 0/1, which onnxruntime reads as 0; a NaN, infinite or
negative ``scale``, an infinite ``softcap``). Mode 2's masked
entries are ``-inf`` as specified; onnxruntime writes the lowest float there instead.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, is_read, optional_input, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import LIMIT, NO_IMPORTER, WRONG_RESULTS, Context, Pass, Rule

#: Static masks up to this many elements become one constant.
MAX_CONSTANT_MASK = 1 << 16
_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_EVIDENCE = "importer source (onnxOpImporters.cpp importAttention, AttentionHelpers.cpp)"

Dim = int | gs.Tensor  # a static length, or a runtime int64 scalar


# ------------------------------------------------------------------ predicates
def _extra_outputs(node: gs.Node, ctx: Context) -> bool:
    return any(t.name for t in node.outputs[1:])


def _past(node: gs.Node, ctx: Context) -> bool:
    return optional_input(node, 4) is not None or optional_input(node, 5) is not None


def _ignored_attributes(node: gs.Node, ctx: Context) -> bool:
    window = int(node.attrs.get("left_window_size", -1)) >= 0 or int(node.attrs.get("right_window_size", -1)) >= 0
    return float(node.attrs.get("softcap", 0.0)) != 0.0 or window or optional_input(node, 6) is not None


def _not_rank4(node: gs.Node, ctx: Context) -> bool:
    """3-D Q/K/V, or a mask of rank < 4 or covering fewer keys than there are (statically)."""
    q, mask = node.inputs[0], optional_input(node, 3)
    if q.shape is not None and len(q.shape) == 3:
        return True
    if mask is None or mask.shape is None:
        return False
    keys = _dim(node.inputs[1], 2)
    width = _dim(mask, len(mask.shape) - 1) if mask.shape else None
    return len(mask.shape) < 4 or (keys is not None and width is not None and 1 < width < keys)


# ----------------------------------------------------------------- the rewrite

def _static(d: object) -> int | None:
    return int(d) if isinstance(d, (int, np.integer)) and d >= 0 else None


def _dim(t: gs.Tensor, axis: int) -> int | None:
    return _static(t.shape[axis]) if t.shape is not None and len(t.shape) > axis else None


def rewrite(node: gs.Node, ctx: Context) -> None:
    b = ctx.builder
    q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
    bf16 = _is_bf16(q)  # computed in float32, cast back: numpy has no bfloat16 for the constants
    dtype = np.dtype(np.float32) if bf16 else tensor_dtype(q)
    if q.shape is None or len(q.shape) not in (3, 4):
        raise Skip("Q's rank is unknown (run shape inference upstream)")
    if dtype is None:
        raise Skip("Q's type is unknown (run shape inference upstream)")
    if dtype not in _FLOATS:
        raise Skip(f"{dtype} Q is not decomposed (fp16/bf16/fp32/fp64 only)")
    if tensor_dtype(v) not in (None, dtype) or bf16 != _is_bf16(v):
        raise Skip("V has another type than Q")
    a = node.attrs
    mask, past_k, past_v = optional_input(node, 3), optional_input(node, 4), optional_input(node, 5)
    nonpad = optional_input(node, 6)
    if (past_k is None) != (past_v is None):
        raise Skip("past_key without past_value (or the reverse): the op requires both")
    mode = int(a.get("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise Skip(f"qk_matmul_output_mode {mode} is not one the op defines (0-3)")
    _check_numbers(a)
    q_heads, kv_heads, head = _heads(node)

    def value(t: gs.Tensor) -> gs.Tensor:
        return b.cast(t, np.float32) if bf16 else t

    qv, kv, vv = value(q), value(k), value(v)
    if len(q.shape) == 3:
        q4, k4, v4 = _split_heads(b, qv, q_heads), _split_heads(b, kv, kv_heads), _split_heads(b, vv, kv_heads)
    else:
        q4, k4, v4 = qv, kv, vv
    k_all = k4 if past_k is None else b.concat([value(past_k), k4], axis=2)
    v_all = v4 if past_v is None else b.concat([value(past_v), v4], axis=2)

    root = _sqrt_scale(b, a, head, q4, dtype)
    k_rep, v_rep = _repeat_kv(b, k_all, q4, q_heads, kv_heads), _repeat_kv(b, v_all, q4, q_heads, kv_heads)
    raw = b.op("MatMul", [b.op("Mul", [q4, root], dtype=dtype),
                          b.transpose(b.op("Mul", [k_rep, root], dtype=dtype), [0, 1, 3, 2])], dtype=dtype)
    capped = raw
    softcap = float(a.get("softcap", 0.0))
    if softcap > 0:
        c = np.array(softcap, dtype)
        capped = b.op("Mul", [b.op("Tanh", [b.op("Div", [raw, c], dtype=dtype)], dtype=dtype), c], dtype=dtype)

    q_len = _dim(q, 2 if len(q.shape) == 4 else 1)
    past_len = None if past_k is None else _length(b, past_k, 2)
    k_len = _total_len(k, 2 if len(q.shape) == 4 else 1, past_len)
    bias, guard = _bias(b, node, ctx, dtype, mask, nonpad, q_len, k_len, past_len, k_all)
    scores = capped if bias is None else b.op("Add", [capped, bias], dtype=dtype)

    precision = a.get("softmax_precision")
    work = dtype
    if precision is not None and not (bf16 and int(precision) in (onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT)):
        work = _np_type(int(precision))
    probs = b.op("Softmax", [scores if work == dtype else b.cast(scores, work)], {"axis": -1}, dtype=work)
    if guard is not None:
        probs = b.op("Where", [guard, np.zeros((1, 1, 1, 1), work), probs], dtype=work)
    if work != dtype:
        probs = b.cast(probs, dtype)
    y = b.op("MatMul", [probs, v_rep], dtype=dtype)
    if len(q.shape) == 3:
        y = b.reshape(b.transpose(y, [0, 2, 1, 3]), np.array([0, 0, -1], np.int64), dtype=dtype)
    qk = (raw, capped, scores, probs)[mode]
    # last: replace_tensor hands each new tensor's producer to the old name
    for k_out, new in zip(node.outputs, (y, k_all, v_all, qk), strict=False):
        if k_out is node.outputs[0] or is_read(k_out, ctx.graph):
            replace_tensor(ctx.graph, k_out, b.op("Cast", [new], {"to": onnx.TensorProto.BFLOAT16}) if bf16 else new)


def _check_numbers(a: dict) -> None:
    """Attributes the op defines narrower than their type, left as they are (the model as
    exported is its author's to fix): is_causal is 0 or 1 (onnxruntime does not read 7 as 1), and
    scale and softcap are numbers (NaN has no decomposition; Q and K are each scaled by the square
    root of scale, which a negative scale has not)."""
    if int(a.get("is_causal", 0)) not in (0, 1):
        raise Skip(f"is_causal {a['is_causal']} is not one the op defines (0 or 1)")
    if "scale" in a and not (math.isfinite(float(a["scale"])) and float(a["scale"]) >= 0):
        raise Skip(f"scale {a['scale']} is not decomposed (a finite number >= 0: Q and K are each scaled by its square root)")
    if not math.isfinite(float(a.get("softcap", 0.0))):
        raise Skip(f"softcap {a['softcap']} is not a finite number")


def _is_bf16(t: gs.Tensor) -> bool:
    return t.dtype == onnx.TensorProto.BFLOAT16 or str(t.dtype) == "bfloat16"


def _np_type(onnx_type: int) -> np.dtype:
    if onnx_type == onnx.TensorProto.BFLOAT16:
        raise Skip("softmax_precision bfloat16 on fp16/fp32/fp64 Q is not decomposed")
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(onnx_type))


def _heads(node: gs.Node) -> tuple[int | None, int | None, int | None]:
    """(q heads, kv heads, Q's head size); None where only the running model knows."""
    q, k = node.inputs[0], node.inputs[1]
    if len(q.shape) == 3:
        q_heads, kv_heads = int(node.attrs.get("q_num_heads", 0)), int(node.attrs.get("kv_num_heads", 0))
        if q_heads <= 0 or kv_heads <= 0:
            raise Skip("3-D Q/K/V without q_num_heads/kv_num_heads")
        hidden = _dim(q, 2)
        head = hidden // q_heads if hidden is not None else None
        if q_heads % kv_heads:
            raise Skip(f"{q_heads} query heads are not a multiple of {kv_heads} key/value heads")
        return q_heads, kv_heads, head
    q_heads, kv_heads = _dim(q, 1), _dim(k, 1)
    if q_heads is not None and kv_heads is not None and q_heads % kv_heads:
        raise Skip(f"{q_heads} query heads are not a multiple of {kv_heads} key/value heads")
    if q_heads is None and kv_heads is None and q.shape[1] == k.shape[1]:
        q_heads = kv_heads = 1  # the same symbol: no grouping, whatever the count
    return q_heads, kv_heads, _dim(q, 3)


def _split_heads(b: Builder, x: gs.Tensor, heads: int | None) -> gs.Tensor:
    """[B, S, heads * D] -> [B, heads, S, D]."""
    return b.transpose(b.reshape(x, np.array([0, 0, heads, -1], np.int64)), [0, 2, 1, 3])


def _sqrt_scale(b: Builder, a: dict, head: int | None, q4: gs.Tensor, dtype: np.dtype) -> gs.Tensor:
    """sqrt(scale) in Q's type, as the op applies it to Q and to K."""
    if "scale" in a:
        return b.const(np.array(np.sqrt(np.float64(a["scale"])), dtype), hint="sqrt_scale")
    if head is not None:
        return b.const(np.array(np.sqrt(1 / np.sqrt(np.float64(head))), dtype), hint="sqrt_scale")
    size = b.cast(b.op("Gather", [b.shape(q4), np.array(3, np.int64)], {"axis": 0}, dtype=np.int64), dtype)
    return b.op("Sqrt", [b.op("Div", [np.array(1, dtype), b.op("Sqrt", [size], dtype=dtype)], dtype=dtype)], dtype=dtype)


def _repeat_kv(b: Builder, x: gs.Tensor, q: gs.Tensor, q_heads: int | None, kv_heads: int | None) -> gs.Tensor:
    """[B, kv, S, D] -> [B, q, S, D], kv head h // group for head h (Expand, no copies of weights).
    Head counts only the running model knows (4-D inputs with dynamic dim 1) are read with Shape."""
    if q_heads is not None and q_heads == kv_heads:
        return x
    tail = b.slice(b.shape(x), np.array([2], np.int64), np.array([4], np.int64), axes=[0])
    if q_heads is not None and kv_heads is not None:
        group: gs.Tensor | np.ndarray = np.array([q_heads // kv_heads], np.int64)
        heads: gs.Tensor | np.ndarray = np.array([q_heads], np.int64)
    else:
        heads = b.slice(b.shape(q), np.array([1], np.int64), np.array([2], np.int64), axes=[0])
        kv = b.slice(b.shape(x), np.array([1], np.int64), np.array([2], np.int64), axes=[0])
        group = b.op("Div", [heads, kv], dtype=np.int64)
    ones = np.array([1, 1], np.int64)
    wide = b.op("Expand", [b.unsqueeze(x, [2]), b.concat([ones, group, ones], axis=0)])
    return b.reshape(wide, b.concat([np.array([0], np.int64), heads, tail], axis=0))


def _length(b: Builder, t: gs.Tensor, axis: int) -> Dim:
    n = _dim(t, axis)
    return n if n is not None else b.op("Gather", [b.shape(t), np.array(axis, np.int64)], {"axis": 0}, dtype=np.int64)


def _total_len(k: gs.Tensor, axis: int, past: Dim | None) -> int | None:
    """The static key length (past + new), or None."""
    n = _dim(k, axis)
    if n is None or (past is not None and not isinstance(past, int)):
        return None
    return n + (past or 0)


def _arange(b: Builder, n: Dim | None, t: gs.Tensor, axis: int, shape: list[int]) -> gs.Tensor:
    """0..n-1 as int64, reshaped to ``shape`` (-1 where the indices go)."""
    if n is None:
        n = _length(b, t, axis)
    if isinstance(n, int):
        return b.const(np.arange(n, dtype=np.int64).reshape(shape), hint="arange")
    r = b.op("Range", [np.array(0, np.int64), n, np.array(1, np.int64)], dtype=np.int64)
    return b.reshape(r, np.array(shape, np.int64), dtype=np.int64)


def _bias(b: Builder, node: gs.Node, ctx: Context, dtype: np.dtype, mask: gs.Tensor | None, nonpad: gs.Tensor | None,
          q_len: Dim | None, k_len: Dim | None, past_len: Dim | None,
          k_all: gs.Tensor) -> tuple[gs.Tensor | None, gs.Tensor | None]:
    """The additive bias (rank 4, or None) and the fully-masked-row test (or None)."""
    a = node.attrs
    causal = bool(int(a.get("is_causal", 0)))
    left, right = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
    zero, ninf = np.zeros((1, 1, 1, 1), dtype), np.full((1, 1, 1, 1), -np.inf, dtype)
    q4 = node.inputs[0]
    q_axis = 2 if len(q4.shape) == 4 else 1
    parts: list[gs.Tensor] = []
    if mask is not None:
        parts.append(_mask_bias(b, mask, dtype, k_len, k_all, nonpad is not None))
    allowed = _structure(b, causal, left, right, nonpad, q_len, k_len, past_len, q4, q_axis, k_all)
    if isinstance(allowed, np.ndarray):
        parts.append(b.const(np.where(allowed, zero, ninf).astype(dtype), hint="position_bias"))
    elif allowed is not None:
        parts.append(b.op("Where", [allowed, zero, ninf], dtype=dtype))
    if not parts:
        return None, None
    bias = parts[0] if len(parts) == 1 else b.op("Add", parts, dtype=dtype)
    if mask is None and nonpad is None and left < 0 and right < 0:
        return bias, None  # causal alone: key 0 is visible to every query (offset >= 0)
    top = b.reduce("ReduceMax", bias, [-1], keepdims=True, dtype=dtype)
    return bias, b.op("Equal", [top, ninf], dtype=np.bool_)


def _mask_bias(b: Builder, mask: gs.Tensor, dtype: np.dtype, k_len: Dim | None, k_all: gs.Tensor,
               external_cache: bool) -> gs.Tensor:
    """attn_mask as a rank-4 additive bias, padded with -inf up to the key length."""
    rank = len(mask.shape) if mask.shape is not None else None
    if rank is None:
        raise Skip("attn_mask's rank is unknown (run shape inference upstream)")
    m = b.unsqueeze(mask, list(range(4 - rank))) if rank < 4 else mask
    if tensor_dtype(mask) == np.bool_:
        m = b.op("Where", [m, np.zeros((1, 1, 1, 1), dtype), np.full((1, 1, 1, 1), -np.inf, dtype)], dtype=dtype)
    elif _is_bf16(mask):
        m = b.cast(m, dtype)
    elif tensor_dtype(mask) not in (None, dtype):
        raise Skip(f"attn_mask of type {tensor_dtype(mask)} with Q of type {dtype}")
    width = _dim(mask, rank - 1)
    if width is not None and isinstance(k_len, int):
        if width > k_len:
            raise Skip(f"attn_mask covers {width} keys, more than the {k_len} there are")
        if width == k_len:
            return m
        missing: Dim = k_len - width
    elif not external_cache:
        return m  # assumed as long as the keys (only an external cache may pass a shorter one)
    else:
        missing = b.op("Sub", [_length(b, k_all, 2), b.op("Gather", [b.shape(m), np.array(3, np.int64)], {"axis": 0})])
    lead = b.slice(b.shape(m), np.array([0], np.int64), np.array([3], np.int64), axes=[0])
    tail = np.array([missing], np.int64) if isinstance(missing, int) else b.reshape(missing, np.array([1], np.int64))
    block = b.op("Expand", [np.full((1, 1, 1, 1), -np.inf, dtype), b.concat([lead, tail], axis=0)], dtype=dtype)
    return b.concat([m, block], axis=3, dtype=dtype)


def _structure(b: Builder, causal: bool, left: int, right: int, nonpad: gs.Tensor | None, q_len: Dim | None,
               k_len: Dim | None, past_len: Dim | None, q: gs.Tensor, q_axis: int,
               k_all: gs.Tensor) -> gs.Tensor | np.ndarray | None:
    """Which keys each query may see by position (causal, window, nonpad): rank-4 BOOL (a numpy
    array when every length is static), or None."""
    if not causal and left < 0 and right < 0 and nonpad is None:
        return None
    # offset: past length; per batch nonpad - q_len (opset 24 external cache); else 0
    offset: Dim | gs.Tensor = 0
    if past_len is not None:
        offset = past_len
    elif nonpad is not None and (causal or left >= 0 or right >= 0):
        ql = q_len if q_len is not None else _length(b, q, q_axis)
        per_batch = b.reshape(nonpad, np.array([-1, 1, 1, 1], np.int64), dtype=np.int64)
        offset = b.op("Sub", [per_batch, np.array(ql, np.int64) if isinstance(ql, int) else ql], dtype=np.int64)
    bounds: list[tuple[str, int]] = []  # (op, added to offset): d <= offset + c  or  d >= offset + c
    if causal:
        bounds.append(("le", 0))
    if right >= 0:
        bounds.append(("le", right))
    if left >= 0:
        bounds.append(("ge", -left))
    static = isinstance(q_len, int) and isinstance(k_len, int) and isinstance(offset, int) \
        and q_len * k_len <= MAX_CONSTANT_MASK
    allowed: gs.Tensor | np.ndarray | None = None
    if bounds and static:
        d = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]
        ok = np.ones_like(d, dtype=bool)
        for op, c in bounds:
            ok &= (d <= offset + c) if op == "le" else (d >= offset + c)
        allowed = ok.reshape(1, 1, q_len, k_len)
    elif bounds:
        rows = _arange(b, q_len, q, q_axis, [1, 1, -1, 1])
        cols = _arange(b, k_len, k_all, 2, [1, 1, 1, -1])
        d = b.op("Sub", [cols, rows], dtype=np.int64)
        for op, c in bounds:
            edge = offset + c if isinstance(offset, int) else (offset if c == 0 else b.op("Add", [offset, np.array(c, np.int64)]))
            edge_t = np.array(edge, np.int64) if isinstance(edge, int) else edge
            outside = b.op("Greater" if op == "le" else "Less", [d, edge_t], dtype=np.bool_)
            ok_t = b.op("Not", [outside], dtype=np.bool_)
            allowed = ok_t if allowed is None else b.op("And", [allowed, ok_t], dtype=np.bool_)
    if nonpad is not None:
        if isinstance(allowed, np.ndarray):
            allowed = b.const(allowed, hint="allowed")
        cols = _arange(b, k_len, k_all, 2, [1, 1, 1, -1])
        limit = b.reshape(nonpad, np.array([-1, 1, 1, 1], np.int64), dtype=np.int64)
        valid = b.op("Less", [cols, limit], dtype=np.bool_)
        allowed = valid if allowed is None else b.op("And", [allowed, valid], dtype=np.bool_)
    return allowed


PASS = Pass(
    name="attention-decompose",
    summary="Rewrite ONNX Attention (opset 23-25: GQA, masks, causal, KV cache, softcap, nonpad_kv_seqlen) into MatMul/Softmax/Where.",
    ops=frozenset({"Attention"}),
    rules=(
        Rule(NO_IMPORTER, "<10.14", "no Attention importer (first in 10.14)", error="unsupported-op-plugin-fallback-generic",
             evidence="operator table (Attention from 10.14); changelog 10.14"),
        Rule(LIMIT, ">=10.14", "present_key/present_value/qk_matmul_output listed: \"TensorRT only supports Attention nodes "
             "with one output\"", _extra_outputs, error="attention-unsupported-form",
             evidence=f"{_EVIDENCE}; NVIDIA/TensorRT#4738 on 10.16; operator table 10.14+"),
        Rule(LIMIT, ">=10.14", "past_key/past_value inputs: \"Setting past_key for the Attention node is not supported\"",
             _past, error="attention-unsupported-form", evidence=f"{_EVIDENCE}; operator table 10.14+"),
        Rule(WRONG_RESULTS, ">=10.14", "softcap, nonpad_kv_seqlen or a sliding window, which the importer does not read",
             _ignored_attributes, evidence=f"{_EVIDENCE} (reads scale, is_causal, q/kv_num_heads only); operator table 10.14+"),
        Rule(LIMIT, ">=10.14", "3-D Q/K/V (q_num_heads/kv_num_heads), or an attn_mask of rank < 4 or shorter than the keys: "
             "the operator table asks for rank 4", _not_rank4,
             evidence="operator table 10.14-11.1 (a later importer source reshapes 3-D Q/K/V and lower-rank masks itself)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
