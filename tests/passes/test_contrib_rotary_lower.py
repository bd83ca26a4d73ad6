"""contrib-rotary-lower: com.microsoft RotaryEmbedding against onnxruntime running the original op:
3-D and 4-D input, position ids or one offset, interleaved, partial rotation; fp32 and fp16."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from graphfix.check.findings import check_model
from tests.helpers.contrib import TOL, floats, ms, ms_model, vi
from tests.helpers.support import check_rewrite

PASS = "contrib-rotary-lower"
HEADS, HEAD, MAX_POS = 2, 8, 32


def _caches(dtype, rd):
    angles = np.arange(MAX_POS)[:, None] * (1.0 / 10000 ** (np.arange(0, rd, 2) / rd))[None]
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float16]), three_d=st.booleans(), offset=st.booleans(), interleaved=st.integers(0, 1),
       partial=st.booleans(), batch=st.integers(1, 2), seq=st.integers(1, 6), seed=st.integers(0, 20))
def test_contrib_rotary_embedding_matches_onnxruntime(dtype, three_d, offset, interleaved, partial, batch, seq, seed):
    rd = HEAD // 2 if partial else HEAD
    dims = [batch, seq, HEADS * HEAD] if three_d else [batch, HEADS, seq, HEAD]
    attrs = {"interleaved": interleaved}
    if partial:
        attrs.update(rotary_embedding_dim=rd, num_heads=HEADS)
    elif three_d:
        attrs["num_heads"] = HEADS
    cos, sin = _caches(dtype, rd)
    pos_dims = [1] if offset else [batch, seq]
    m = ms_model([ms("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], **attrs)],
                 [vi("x", dtype, dims), vi("pos", np.int64, pos_dims), vi("cos", dtype, list(cos.shape)), vi("sin", dtype, list(sin.shape))],
                 [vi("y", dtype, dims)])
    rng = np.random.default_rng(seed)
    pos = np.array([rng.integers(0, MAX_POS - seq)]) if offset else rng.integers(0, MAX_POS, (batch, seq))
    feeds = {"x": floats(dims, dtype, seed), "pos": pos.astype(np.int64), "cos": cos, "sin": sin}
    result = check_rewrite(m, PASS, feeds, *TOL[dtype])
    assert all(n.domain != "com.microsoft" for n in result.model.graph.node)


def test_check_names_this_pass_not_the_onnx_rotary_pass():
    cos, sin = _caches(np.float32, HEAD)
    m = ms_model([ms("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"])],
                 [vi("x", np.float32, [1, HEADS, 4, HEAD]), vi("pos", np.int64, [1, 4]), vi("cos", np.float32, list(cos.shape)),
                  vi("sin", np.float32, list(sin.shape))], [vi("y", np.float32, [1, HEADS, 4, HEAD])])
    for trt in ("8.5", "10.1"):
        assert [f.fix_pass for f in check_model(m, trt).findings if f.severity == "blocking"] == [PASS]
