"""contrib-norm-lower: onnxruntime's fused norms against onnxruntime running the original op, fp32
and fp16, random shapes; gone after the pass; check and --passes auto name the pass."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from graphfix.check.findings import check_model
from tests.helpers.contrib import TOL, floats, ms, ms_model, vi, weight
from tests.helpers.support import check_rewrite

PASS = "contrib-norm-lower"
DTYPES = st.sampled_from([np.float32, np.float16])


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


def _skip_ln(dtype, dims, skip_dims, beta=True, bias=True, outputs=("y",)):
    h = dims[-1]
    names = ["x", "s", "gamma", "beta" if beta else "", "bias" if bias else ""]
    inits = [weight("gamma", [h], dtype, 2), weight("beta", [h], dtype, 3), weight("bias", [h], dtype, 4)]
    outs = {"y": 0, "mean": 1, "inv": 2, "sum": 3}
    listed = [o if o in outputs else "" for o in ("y", "mean", "inv", "sum")][:max(outs[o] for o in outputs) + 1]
    ovi = [vi(o, np.float32, [*dims[:-1], 1]) if o in ("mean", "inv") else vi(o, dtype, dims) for o in outputs]
    return ms_model([ms("SkipLayerNormalization", names, listed, epsilon=1e-5)], [vi("x", dtype, dims), vi("s", dtype, skip_dims)],
                    ovi, [i for i in inits if i.name in names])


@settings(max_examples=25, deadline=None)
@given(dtype=DTYPES, batch=st.integers(1, 3), seq=st.integers(1, 5), hidden=st.sampled_from([4, 8, 12]),
       skip_form=st.sampled_from(["full", "no-batch", "batch-1"]), beta=st.booleans(), bias=st.booleans(),
       outputs=st.sampled_from([("y",), ("y", "sum"), ("y", "mean", "inv", "sum")]))
def test_skip_layer_normalization_matches_onnxruntime(dtype, batch, seq, hidden, skip_form, beta, bias, outputs):
    dims = [batch, seq, hidden]
    skip_dims = {"full": dims, "no-batch": [seq, hidden], "batch-1": [1, seq, hidden]}[skip_form]
    m = _skip_ln(dtype, dims, skip_dims, beta, bias, outputs)
    feeds = {"x": floats(dims, dtype, 5, 3.0), "s": floats(skip_dims, dtype, 6)}
    result = check_rewrite(m, PASS, feeds, *TOL[dtype])
    assert "SkipLayerNormalization" not in _ops(result.model)


@settings(max_examples=20, deadline=None)
@given(dtype=DTYPES, dims=st.sampled_from([[2, 3, 8], [1, 7, 16], [4, 4]]), bias=st.booleans(), with_sum=st.booleans())
def test_skip_simplified_layer_normalization_matches_onnxruntime(dtype, dims, bias, with_sum):
    h = dims[-1]
    names = ["x", "s", "gamma"] + (["bias"] if bias else [])
    outs = ["y", "", "", "sum"] if with_sum else ["y"]
    m = ms_model([ms("SkipSimplifiedLayerNormalization", names, outs, epsilon=1e-6)], [vi("x", dtype, dims), vi("s", dtype, dims)],
                 [vi(o, dtype, dims) for o in outs if o], [weight("gamma", [h], dtype, 2), weight("bias", [h], dtype, 3)][:len(names) - 2])
    result = check_rewrite(m, PASS, {"x": floats(dims, dtype, 5, 2.0), "s": floats(dims, dtype, 6)}, *TOL[dtype])
    assert "SkipSimplifiedLayerNormalization" not in _ops(result.model)


@settings(max_examples=20, deadline=None)
@given(dtype=DTYPES, dims=st.sampled_from([[2, 3, 8], [5, 16], [2, 2, 3, 4]]), axis=st.integers(-2, -1), opset=st.sampled_from([14, 17, 18]))
def test_simplified_layer_normalization_in_the_default_domain_matches_onnxruntime(dtype, dims, axis, opset):
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=1e-5)
    m = ms_model([node], [vi("x", dtype, dims)], [vi("y", dtype, dims)], [weight("scale", dims[axis:], dtype, 2)], opset)
    result = check_rewrite(m, PASS, {"x": floats(dims, dtype, 5, 2.0)}, *TOL[dtype])
    assert "SimplifiedLayerNormalization" not in _ops(result.model)


@settings(max_examples=15, deadline=None)
@given(dtype=DTYPES, dims=st.sampled_from([[2, 3, 8], [4, 6]]), opset=st.sampled_from([11, 13, 16]))
def test_contrib_layer_normalization_below_opset_17_matches_onnxruntime(dtype, dims, opset):
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)
    m = ms_model([node], [vi("x", dtype, dims)], [vi("y", dtype, dims)], [weight("g", dims[-1:], dtype, 2), weight("b", dims[-1:], dtype, 3)], opset)
    result = check_rewrite(m, PASS, {"x": floats(dims, dtype, 5, 2.0)}, *TOL[dtype])
    assert "LayerNormalization" not in _ops(result.model)


def _embed(dtype, segments=True, mask=True, position_ids=False, outputs=("y", "mask_index", "sum")):
    vocab, positions, hidden = 11, 16, 8
    names = ["ids", "seg" if segments else "", "word", "pos", "segtab" if segments else "", "gamma", "beta",
             "mask" if mask else "", "pid" if position_ids else ""]
    while names[-1] == "":
        names.pop()
    inits = [weight("word", [vocab, hidden], dtype, 1), weight("pos", [positions, hidden], dtype, 2),
             weight("segtab", [2, hidden], dtype, 3), weight("gamma", [hidden], dtype, 4), weight("beta", [hidden], dtype, 5)]
    ins = [vi("ids", np.int32, ["batch", "seq"])] + [vi(n, np.int32, ["batch", "seq"]) for n in ("seg", "mask") if n in names]
    ins += [vi("pid", np.int32, [1, "seq"])] if position_ids else []
    listed = [o if o in outputs else "" for o in ("y", "mask_index", "sum")]
    while listed[-1] == "":
        listed.pop()
    ovi = [vi(o, np.int32, ["batch"]) if o == "mask_index" else vi(o, dtype, ["batch", "seq", hidden]) for o in listed if o]
    return ms_model([ms("EmbedLayerNormalization", names, listed, epsilon=1e-12)], ins, ovi,
                    [i for i in inits if i.name in names])


@settings(max_examples=20, deadline=None)
@given(dtype=DTYPES, batch=st.integers(1, 3), seq=st.integers(1, 9), segments=st.booleans(), mask=st.booleans(),
       position_ids=st.booleans(), seed=st.integers(0, 100))
def test_embed_layer_normalization_matches_onnxruntime(dtype, batch, seq, segments, mask, position_ids, seed):
    rng = np.random.default_rng(seed)
    m = _embed(dtype, segments, mask, position_ids)
    feeds = {"ids": rng.integers(0, 11, (batch, seq)).astype(np.int32), "seg": rng.integers(0, 2, (batch, seq)).astype(np.int32),
             "mask": rng.integers(0, 2, (batch, seq)).astype(np.int32), "pid": rng.permutation(16)[:seq][None].astype(np.int32)}
    result = check_rewrite(m, PASS, feeds, *TOL[dtype])
    assert "EmbedLayerNormalization" not in _ops(result.model)


@pytest.mark.parametrize("trt", ["8.5", "8.6", "10.1"])
def test_check_names_the_pass_and_auto_leaves_no_contrib_norm(trt):
    import graphfix

    m = _skip_ln(np.float32, [2, 3, 8], [2, 3, 8])
    findings = [f for f in check_model(m, trt).findings if f.severity == "blocking"]
    assert [f.fix_pass for f in findings] == [PASS]
    result = graphfix.fix(m, "auto", trt=trt)
    assert result.report.status == "ok"
    assert "SkipLayerNormalization" not in _ops(result.model)
    assert not [f for f in check_model(result.model, trt).findings if f.severity == "blocking"]


def test_a_read_mask_index_of_mask_index_type_0_is_a_finding():
    m = _embed(np.float32)
    m.graph.node[0].attribute.append(helper.make_attribute("mask_index_type", 0))
    from graphfix import passes

    result = passes.get(PASS).apply(m)
    assert result.rewritten == 0 and "mask_index_type" in result.findings[0].message
