"""contrib-attention-lower: com.microsoft Attention against onnxruntime running the original op:
every mask form, unidirectional, past/present, attention_bias, qkv_hidden_sizes, scale; fp32 and fp16.
MultiHeadAttention and GroupQueryAttention (KV heads, packed QKV, padded prompts, ragged and static
caches, chunks, window, softcap, rotary, attention_bias) the same way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.contrib import TOL, floats, ms, ms_model, vi, weight
from tests.helpers.support import check_rewrite

PASS = "contrib-attention-lower"
HIDDEN, HEADS = 8, 2


def _attention(dtype, batch, seq, mask=None, past=0, unidirectional=0, bias=True, attention_bias=False, sizes=None, **attrs):
    hq, hk, hv = sizes or (HIDDEN, HIDDEN, HIDDEN)
    names = ["x", "w", "b" if bias else "", "mask" if mask else "", "past" if past else "", "ab" if attention_bias else ""]
    while names[-1] == "":
        names.pop()
    ins = [vi("x", dtype, [batch, seq, HIDDEN])]
    total = past + seq
    if mask:
        ins.append(vi("mask", np.int32, {"raw2": [batch, total], "raw3": [batch, seq, total], "lengths": [batch],
                                         "ends-starts": [2 * batch]}[mask]))
    if past:
        ins.append(vi("past", dtype, [2, batch, HEADS, past, HIDDEN // HEADS]))
    if attention_bias:
        ins.append(vi("ab", dtype, [1, HEADS, seq, total]))
    outs = ["y", "present"] if past else ["y"]
    ovi = [vi("y", dtype, [batch, seq, hv])] + ([vi("present", dtype, [2, batch, HEADS, total, HIDDEN // HEADS])] if past else [])
    if sizes:
        attrs["qkv_hidden_sizes"] = list(sizes)
    node = ms("Attention", names, outs, num_heads=HEADS, unidirectional=unidirectional, **attrs)
    inits = [weight("w", [HIDDEN, hq + hk + hv], dtype, 2, 0.5), weight("b", [hq + hk + hv], dtype, 3, 0.1)][:1 + int(bias)]
    return ms_model([node], ins, ovi, inits)


def _feeds(dtype, batch, seq, mask, past, seed):
    rng = np.random.default_rng(seed)
    total = past + seq
    lengths = rng.integers(1, total + 1, batch)
    starts = np.array([rng.integers(0, n) for n in lengths])
    raw = (np.arange(total)[None] < lengths[:, None]).astype(np.int32)
    return {"x": floats([batch, seq, HIDDEN], dtype, seed), "past": floats([2, batch, HEADS, past, HIDDEN // HEADS], dtype, seed + 1),
            "ab": floats([1, HEADS, seq, total], dtype, seed + 2),
            "mask": {"raw2": raw, "raw3": np.broadcast_to(raw[:, None], (batch, seq, total)).copy(),
                     "lengths": lengths.astype(np.int32), "ends-starts": np.concatenate([lengths, starts]).astype(np.int32),
                     None: None}[mask]}


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float16]), batch=st.integers(1, 3), seq=st.integers(1, 5),
       mask=st.sampled_from([None, "raw2", "raw3", "lengths", "ends-starts"]), past=st.sampled_from([0, 0, 3]),
       unidirectional=st.integers(0, 1), bias=st.booleans(), attention_bias=st.booleans(), seed=st.integers(0, 50))
def test_attention_matches_onnxruntime(dtype, batch, seq, mask, past, unidirectional, bias, attention_bias, seed):
    if past and mask in ("lengths", "ends-starts"):
        mask = "raw2"  # onnxruntime's CPU kernel takes 1-D mask_index without past only
    attention_bias = attention_bias and not past  # "Attention cannot have both past and attention_bias"
    m = _attention(dtype, batch, seq, mask, past, unidirectional, bias, attention_bias)
    feeds = {k: v for k, v in _feeds(dtype, batch, seq, mask, past, seed).items() if v is not None}
    result = check_rewrite(m, PASS, feeds, *TOL[dtype])
    assert all(n.domain != "com.microsoft" for n in result.model.graph.node)


@pytest.mark.parametrize("sizes,scale", [((8, 8, 4), None), ((4, 4, 8), 0.3), (None, 1.0)])
def test_unequal_hidden_sizes_and_scale_match_onnxruntime(sizes, scale):
    attrs = {} if scale is None else {"scale": scale}
    m = _attention(np.float32, 2, 4, "raw2", sizes=sizes, **attrs)
    check_rewrite(m, PASS, {k: v for k, v in _feeds(np.float32, 2, 4, "raw2", 0, 0).items() if k in ("x", "mask")}, *TOL[np.float32])


def test_mask_filter_value_is_what_masked_keys_get():
    m = _attention(np.float32, 2, 4, "raw2", mask_filter_value=-3.0)
    check_rewrite(m, PASS, {k: v for k, v in _feeds(np.float32, 2, 4, "raw2", 0, 1).items() if k in ("x", "mask")}, *TOL[np.float32])


def test_rotary_attention_is_a_finding_and_check_names_the_pass():
    m = _attention(np.float32, 1, 4, do_rotary=1)
    result = passes.get(PASS).apply(m)
    assert result.rewritten == 0 and "do_rotary" in result.findings[0].message
    plain = _attention(np.float32, 1, 4)
    assert [f.fix_pass for f in check_model(plain, "10.1").findings if f.severity == "blocking"] == [PASS]


def test_the_onnx_attention_pass_leaves_the_contrib_op_alone():
    """attention-decompose reads the opset-23 op's Q/K/V inputs: a com.microsoft node is not its."""
    m = _attention(np.float32, 1, 4)
    assert passes.get("attention-decompose").apply(m).matched == 0


def _mha(dtype, batch, seq, kv_len, mask, past, unidirectional, bias):
    head = HIDDEN // HEADS
    names = ["q", "k", "v", "bias" if bias else "", "mask" if mask else "", "", "pk" if past else "", "pv" if past else ""]
    while names[-1] == "":
        names.pop()
    total = past + kv_len
    ins = [vi("q", dtype, [batch, seq, HIDDEN]), vi("k", dtype, [batch, kv_len, HIDDEN]), vi("v", dtype, [batch, kv_len, HIDDEN])]
    if mask:
        ins.append(vi("mask", np.int32, [batch, total] if mask == "raw2" else [batch]))
    if past:
        ins += [vi("pk", dtype, [batch, HEADS, past, head]), vi("pv", dtype, [batch, HEADS, past, head])]
    outs = ["y", "present_key", "present_value"] if past else ["y"]
    ovi = [vi("y", dtype, [batch, seq, HIDDEN])] + [vi(o, dtype, [batch, HEADS, total, head]) for o in outs[1:]]
    node = ms("MultiHeadAttention", names, outs, num_heads=HEADS, unidirectional=unidirectional)
    return ms_model([node], ins, ovi, [weight("bias", [3 * HIDDEN], dtype, 3, 0.1)] if bias else [])


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float16]), batch=st.integers(1, 2), seq=st.integers(1, 4), cross=st.booleans(),
       mask=st.sampled_from([None, "raw2", "lengths"]), past=st.sampled_from([0, 2]), unidirectional=st.integers(0, 1),
       bias=st.booleans(), seed=st.integers(0, 30))
def test_multi_head_attention_matches_onnxruntime(dtype, batch, seq, cross, mask, past, unidirectional, bias, seed):
    kv_len = seq + 2 if cross and not unidirectional else seq
    if past and mask == "lengths":
        mask = "raw2"
    m = _mha(dtype, batch, seq, kv_len, mask, past, unidirectional, bias)
    rng = np.random.default_rng(seed)
    total = past + kv_len
    lengths = rng.integers(1, total + 1, batch)
    head = HIDDEN // HEADS
    feeds = {"q": floats([batch, seq, HIDDEN], dtype, seed), "k": floats([batch, kv_len, HIDDEN], dtype, seed + 1),
             "v": floats([batch, kv_len, HIDDEN], dtype, seed + 2), "pk": floats([batch, HEADS, past, head], dtype, seed + 3),
             "pv": floats([batch, HEADS, past, head], dtype, seed + 4),
             "mask": (np.arange(total)[None] < lengths[:, None]).astype(np.int32) if mask == "raw2" else lengths.astype(np.int32)}
    feeds = {k: v for k, v in feeds.items() if k in {i.name for i in m.graph.input}}
    try:
        result = check_rewrite(m, PASS, feeds, *TOL[dtype])
    except Exception as exc:
        if "NOT_IMPLEMENTED" in str(exc) or "not supported" in str(exc).lower():
            return  # a form onnxruntime's CPU kernel refuses: nothing to compare against
        raise
    assert all(n.domain != "com.microsoft" for n in result.model.graph.node)


def _gqa(dtype, batch, seq, heads, kv_heads, head, past, packed=False, rotary=False, bias=False, position_ids=False, **attrs):
    """GroupQueryAttention over [batch, seq] new tokens; ``past`` the past buffers' length (None: none)."""
    names = ["q", "" if packed else "k", "" if packed else "v", "pk" if past is not None else "", "pv" if past is not None else "",
             "seqlens_k", "total", "cos" if rotary else "", "sin" if rotary else "", "pos" if position_ids else "",
             "bias" if bias else ""]
    while names[-1] == "":
        names.pop()
    width = (heads + 2 * kv_heads) * head if packed else heads * head
    ins = [vi("q", dtype, [batch, seq, width])]
    if not packed:
        ins += [vi("k", dtype, [batch, seq, kv_heads * head]), vi("v", dtype, [batch, seq, kv_heads * head])]
    if past is not None:
        ins += [vi(n, dtype, [batch, kv_heads, past, head]) for n in ("pk", "pv")]
    ins += [vi("seqlens_k", np.int32, [batch]), vi("total", np.int32, [])]
    ins += [vi("pos", np.int64, [batch, seq])] if position_ids else []
    ins += [vi("bias", dtype, [batch, heads, seq, "T"])] if bias else []
    outs = ["y", "present_key", "present_value"]
    node = ms("GroupQueryAttention", names, outs, num_heads=heads, kv_num_heads=kv_heads, do_rotary=int(rotary), **attrs)
    inits = []
    if rotary:
        angles = np.arange(64)[:, None] * (0.5 ** np.arange(head // 2))[None] * 0.3
        inits = [numpy_helper.from_array(np.cos(angles).astype(dtype), "cos"), numpy_helper.from_array(np.sin(angles).astype(dtype), "sin")]
    ovi = [vi("y", dtype, [batch, seq, heads * head])] + [vi(o, dtype, [batch, kv_heads, "present", head]) for o in outs[1:]]
    return ms_model([node], ins, ovi, inits)


def _gqa_feeds(m, dtype, tokens, total, seed):
    """Random inputs for the model's shapes, seqlens_k = tokens - 1."""
    feeds = {}
    for i in m.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else total for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = floats(dims, dtype, seed + len(feeds))
    feeds["seqlens_k"] = np.asarray(tokens, np.int32) - 1
    if "pos" in feeds:  # any positions inside the caches' 64 rows
        feeds["pos"] = np.random.default_rng(seed).integers(0, 64 - feeds["pos"].shape[1], feeds["pos"].shape)
    feeds["total"] = np.array(total, np.int32)
    return feeds


def _check_gqa(m, dtype, tokens, total, seed):
    result = check_rewrite(m, PASS, _gqa_feeds(m, dtype, tokens, total, seed), *TOL[dtype])
    assert all(n.domain != "com.microsoft" for n in result.model.graph.node)


HEAD_LAYOUTS = [(2, 1), (4, 2), (4, 4), (6, 2)]


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float16]), layout=st.sampled_from(HEAD_LAYOUTS), head=st.sampled_from([8, 16]),
       batch=st.integers(1, 3), seq=st.integers(1, 5), packed=st.booleans(), past=st.sampled_from([None, 0]),
       padding=st.lists(st.integers(0, 4), min_size=3, max_size=3), seed=st.integers(0, 50))
def test_group_query_attention_first_prompt_matches_onnxruntime(dtype, layout, head, batch, seq, packed, past, padding, seed):
    """The first prompt (total_sequence_length = S): right padding per entry (seqlens_k + 1 < S)
    hides the padded keys; the present buffers are the new keys/values."""
    heads, kv_heads = layout
    tokens = [max(1, seq - p) for p in padding[:batch]]
    _check_gqa(_gqa(dtype, batch, seq, heads, kv_heads, head, past, packed), dtype, tokens, seq, seed)


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float16]), layout=st.sampled_from(HEAD_LAYOUTS), head=st.sampled_from([8, 16]),
       batch=st.integers(1, 3), cached=st.lists(st.integers(0, 6), min_size=3, max_size=3), static=st.integers(0, 3),
       packed=st.booleans(), bias=st.booleans(), seed=st.integers(0, 50))
def test_group_query_attention_decoding_matches_onnxruntime(dtype, layout, head, batch, cached, static, packed, bias, seed):
    """One new token per entry after a ragged number of cached ones: a past buffer as long as the
    longest (present one longer), or a static one longer than total_sequence_length (present as
    long; attention_bias still [.., total_sequence_length])."""
    heads, kv_heads = layout
    tokens = [c + 1 for c in cached[:batch]]
    total = max(tokens)
    past = total - 1 + static if static else total - 1
    _check_gqa(_gqa(dtype, batch, 1, heads, kv_heads, head, past, packed, bias=bias), dtype, tokens, total, seed)


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float16]), layout=st.sampled_from(HEAD_LAYOUTS), seq=st.integers(2, 4),
       cached=st.integers(1, 5), static=st.integers(0, 2), seed=st.integers(0, 50))
def test_group_query_attention_chunk_after_a_cache_matches_onnxruntime(dtype, layout, seq, cached, static, seed):
    """Several new tokens after cached ones (batch 1, as onnxruntime requires)."""
    heads, kv_heads = layout
    total = cached + seq  # no cached token would be the first prompt, covered above
    past = total - 1 + static if static else cached
    _check_gqa(_gqa(dtype, 1, seq, heads, kv_heads, 8, past), dtype, [total], total, seed)


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float16]), layout=st.sampled_from(HEAD_LAYOUTS), decoding=st.booleans(),
       window=st.sampled_from([-1, 1, 2, 4]), softcap=st.sampled_from([0.0, 0.5, 3.0]), scale=st.sampled_from([None, 0.2]),
       rotary=st.booleans(), interleaved=st.integers(0, 1), bias=st.booleans(), causal=st.integers(0, 1), seed=st.integers(0, 50))
def test_group_query_attention_options_match_onnxruntime(dtype, layout, decoding, window, softcap, scale, rotary, interleaved,
                                                         bias, causal, seed):
    """local_window_size, softcap, scale, do_rotary (cos/sin caches, interleaved or not), attention_bias, causal=0."""
    heads, kv_heads = layout
    window = window if causal else -1  # onnxruntime: "local_window_size must be -1 when causal is 0"
    batch, seq, tokens = (2, 1, [5, 3]) if decoding else (2, 4, [4, 2])
    total = max(tokens)
    attrs = {"local_window_size": window, "softcap": softcap, "rotary_interleaved": interleaved, "causal": causal}
    if scale is not None:
        attrs["scale"] = scale
    m = _gqa(dtype, batch, seq, heads, kv_heads, 16, total - 1 if decoding else None, rotary=rotary, bias=bias, **attrs)
    _check_gqa(m, dtype, tokens, total, seed)


@pytest.mark.parametrize("attrs,reason", [({"sliding_window_cache": 1, "local_window_size": 4}, "sliding_window_cache"),
                                          ({"qk_output": 1}, "qk_output"), ({"smooth_softmax": 1}, "smooth_softmax"),
                                          ({"k_quant_type": "PER_TENSOR"}, "k_quant_type")])
def test_group_query_attention_forms_not_reproduced_are_findings(attrs, reason):
    result = passes.get(PASS).apply(_gqa(np.float32, 1, 1, 4, 2, 16, 3, **attrs))
    assert result.rewritten == 0 and reason in result.findings[0].message


def test_group_query_attention_is_blocking_and_check_names_the_pass():
    m = _gqa(np.float32, 1, 1, 4, 2, 16, 3)
    assert [f.fix_pass for f in check_model(m, "8.6").findings if f.severity == "blocking"] == [PASS]


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float16]), case=st.sampled_from(["prompt", "padded", "decode", "static", "chunk", "one"]),
       seed=st.integers(0, 50))
def test_group_query_attention_position_ids_match_onnxruntime(dtype, case, seed):
    """do_rotary with a position_ids input: after the first prompt each row's own position; in the
    first prompt (S = total_sequence_length) position_ids[0, 0] + s for every entry (measured)."""
    batch, seq, tokens, past = {"prompt": (2, 4, [4, 4], None), "padded": (2, 4, [4, 2], None), "decode": (2, 1, [5, 3], 4),
                                "static": (2, 1, [5, 2], 9), "chunk": (1, 3, [6], 3), "one": (2, 1, [1, 1], 6)}[case]
    _check_gqa(_gqa(dtype, batch, seq, 4, 2, 16, past, rotary=True, position_ids=True), dtype, tokens, max(tokens), seed)
