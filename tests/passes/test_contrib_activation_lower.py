"""contrib-activation-lower: onnxruntime's fused activations against onnxruntime running the
original op, fp32 and fp16, random shapes; the release gate of com.microsoft Gelu."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

import graphfix
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.contrib import TOL, floats, ms, ms_model, vi, weight
from tests.helpers.support import check_rewrite, ort_run

PASS = "contrib-activation-lower"
DTYPES = st.sampled_from([np.float32, np.float16])
SHAPES = st.sampled_from([[2, 3, 8], [4, 6], [1, 5, 2, 4], [8]])


def _one(op, dtype, dims, extra=(), **attrs):
    """``op`` on ``x`` and the constant inputs ``extra`` (name, shape)."""
    inits = [weight(n, s, dtype, k + 2) for k, (n, s) in enumerate(extra)]
    return ms_model([ms(op, ["x", *[n for n, _ in extra]], ["y"], **attrs)], [vi("x", dtype, dims)], [vi("y", dtype, dims)], inits)


@settings(max_examples=30, deadline=None)
@given(dtype=DTYPES, dims=SHAPES, op=st.sampled_from(["Gelu", "FastGelu", "FastGelu+bias", "BiasGelu", "QuickGelu", "BiasAdd"]),
       alpha=st.sampled_from([None, 1.702, 1.0, 0.5]))
def test_fused_activations_match_onnxruntime(dtype, dims, op, alpha):
    h = dims[-1]
    extra = {"FastGelu+bias": [("bias", [h])], "BiasGelu": [("bias", [h])], "BiasAdd": [("bias", [h]), ("skip", dims)]}.get(op, [])
    attrs = {"alpha": alpha} if op == "QuickGelu" and alpha is not None else {}
    m = _one(op.split("+")[0], dtype, dims, extra, **attrs)
    feeds = {"x": floats(dims, dtype, 5, 3.0)}
    if op == "BiasAdd":  # CUDA-only kernel: the reference is the spec's formula, X + bias + skip
        result = passes.get(PASS).apply(m)
        x, bias, skip = feeds["x"], *(numpy_helper.to_array(t) for t in m.graph.initializer)
        np.testing.assert_allclose(ort_run(result.model, feeds)[0], x + bias + skip, *TOL[dtype][::-1])
    else:
        result = check_rewrite(m, PASS, feeds, *TOL[dtype])
    assert all(n.domain != "com.microsoft" for n in result.model.graph.node)


@settings(max_examples=15, deadline=None)
@given(dtype=DTYPES, batch=st.integers(1, 3), seq=st.integers(1, 6), half=st.sampled_from([32, 64, 96]))
def test_bias_split_gelu_matches_the_spec(dtype, batch, seq, half):
    """onnxruntime has a CUDA kernel only: the reference is ContribOperators.md's formula,
    ``(X + bias)[..., :D] * Gelu((X + bias)[..., D:])`` with the erf Gelu."""
    dims = [batch, seq, 2 * half]
    m = ms_model([ms("BiasSplitGelu", ["x", "bias"], ["y"])], [vi("x", dtype, dims)], [vi("y", dtype, [batch, seq, half])],
                 [weight("bias", [2 * half], dtype, 2)])
    x = floats(dims, dtype, 5, 2.0)
    s = (x + numpy_helper.to_array(m.graph.initializer[0])).astype(np.float64)
    right = s[..., half:]
    want = s[..., :half] * 0.5 * right * (1 + np.vectorize(math.erf)(right / math.sqrt(2)))
    result = passes.get(PASS).apply(m)
    assert [n.op_type for n in result.model.graph.node if n.domain == "com.microsoft"] == []
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0].astype(np.float64), want, *TOL[dtype][::-1])


@pytest.mark.parametrize("trt,blocked", [("8.5", True), ("8.6", True), ("10.1", False)])
def test_com_microsoft_gelu_is_lowered_only_where_the_release_has_no_gelu_importer(trt, blocked):
    m = _one("Gelu", np.float32, [2, 8])
    findings = [f for f in check_model(m, trt).findings if f.severity == "blocking"]
    assert [f.fix_pass for f in findings] == ([PASS] if blocked else [])


@pytest.mark.parametrize("trt", ["8.5", "10.1"])
def test_auto_lowers_fast_gelu_at_every_release(trt):
    m = _one("FastGelu", np.float32, [2, 8], [("bias", [8])])
    result = graphfix.fix(m, "auto", trt=trt)
    assert result.report.status == "ok"
    assert [p.name for p in result.report.passes if p.verdict == "kept"] == [PASS]
