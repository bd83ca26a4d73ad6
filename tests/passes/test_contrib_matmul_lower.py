"""contrib-matmul-lower: FusedMatMul/TransposeMatMul, FusedConv and FusedGemm against onnxruntime
running the original op, fp32 and fp16; unsupported attributes are findings."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from graphfix import passes
from tests.helpers.contrib import TOL, floats, ms, ms_model, vi, weight
from tests.helpers.support import check_rewrite

PASS = "contrib-matmul-lower"
DTYPES = st.sampled_from([np.float32, np.float16])
ACTIVATIONS = [("", []), ("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.2]), ("HardSigmoid", [0.3, 0.4]),
               ("Clip", [-0.5, 0.7])]


@settings(max_examples=30, deadline=None)
@given(dtype=DTYPES, op=st.sampled_from(["FusedMatMul", "TransposeMatMul"]), trans_a=st.booleans(), trans_b=st.booleans(),
       alpha=st.sampled_from([1.0, 0.125, -2.0]), batch=st.sampled_from([[], [2], [2, 3]]), m=st.integers(1, 4),
       k=st.integers(1, 5), n=st.integers(1, 4))
def test_fused_matmul_matches_onnxruntime(dtype, op, trans_a, trans_b, alpha, batch, m, k, n):
    a = [*batch, k, m] if trans_a else [*batch, m, k]
    b = [n, k] if trans_b else [k, n]
    model = ms_model([ms(op, ["a", "b"], ["y"], transA=int(trans_a), transB=int(trans_b), alpha=alpha)],
                     [vi("a", dtype, a)], [vi("y", dtype, [*batch, m, n])], [weight("b", b, dtype, 3)])
    result = check_rewrite(model, PASS, {"a": floats(a, dtype)}, *TOL[dtype])
    assert all(node.domain != "com.microsoft" for node in result.model.graph.node)


@settings(max_examples=25, deadline=None)
@given(dtype=DTYPES, act=st.sampled_from(ACTIVATIONS), residual=st.booleans(), bias=st.booleans(), stride=st.integers(1, 2),
       group=st.sampled_from([1, 2]))
def test_fused_conv_matches_onnxruntime(dtype, act, residual, bias, stride, group):
    if dtype == np.float16 and (residual or act[0] not in ("", "Relu")):
        return  # onnxruntime's fp16 FusedConv (NHWC MLAS) takes Relu or nothing, and no Z
    name, params = act
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [stride, stride], "group": group}
    if name:
        attrs["activation"] = name
    if params:
        attrs["activation_params"] = params
    out = [1, 4, 6 // stride, 6 // stride] if stride == 1 else [1, 4, 3, 3]
    names = ["x", "w", "b" if bias else "", "z" if residual else ""]
    while names[-1] == "":
        names.pop()
    inputs = [vi("x", dtype, [1, 4, 6, 6])] + ([vi("z", dtype, out)] if residual else [])
    model = ms_model([ms("FusedConv", names, ["y"], **attrs)], inputs, [vi("y", dtype, out)],
                     [weight("w", [4, 4 // group, 3, 3], dtype, 2, 0.3), weight("b", [4], dtype, 3)][:1 + int(bias)])
    feeds = {"x": floats([1, 4, 6, 6], dtype), "z": floats(out, dtype, 7)}
    try:
        result = check_rewrite(model, PASS, feeds, *TOL[dtype])
    except Exception as exc:
        if "NOT_IMPLEMENTED" in str(exc) or "Could not find an implementation" in str(exc):
            return  # no CPU kernel for this type: nothing to compare against
        raise
    assert [n.op_type for n in result.model.graph.node][0] == "Conv"


@settings(max_examples=20, deadline=None)
@given(act=st.sampled_from(ACTIVATIONS[1:6]), trans_b=st.booleans(), beta=st.sampled_from([1.0, 0.5]))
def test_fused_gemm_matches_onnxruntime(act, trans_b, beta):
    name, params = act
    attrs = {"transB": int(trans_b), "beta": beta, "alpha": 0.7}
    if name:
        attrs["activation"] = name
        for key, value in zip(("activation_alpha", "activation_beta"), params, strict=False):
            attrs[key] = value
    model = ms_model([ms("FusedGemm", ["a", "b", "c"], ["y"], **attrs)], [vi("a", np.float32, [3, 5])],
                     [vi("y", np.float32, [3, 4])], [weight("b", [4, 5] if trans_b else [5, 4], np.float32, 2), weight("c", [4], np.float32, 3)])
    check_rewrite(model, PASS, {"a": floats([3, 5], np.float32)}, *TOL[np.float32])


def test_batch_transposes_are_a_finding_not_a_rewrite():
    model = ms_model([ms("FusedMatMul", ["a", "b"], ["y"], transBatchA=1)], [vi("a", np.float32, [2, 3, 4])],
                     [vi("y", np.float32, None)], [weight("b", [4, 5], np.float32)])
    result = passes.get(PASS).apply(model)
    assert result.rewritten == 0 and "transBatch" in result.findings[0].message
