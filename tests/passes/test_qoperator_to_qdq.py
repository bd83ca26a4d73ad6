"""qoperator-to-qdq: QOperator nodes against onnxruntime running them, random quantization
parameters (int8/uint8, per-tensor/per-channel, zero points), outputs within one quantization step."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphfix
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.contrib import ms_model, vi
from tests.helpers.support import ort_run, remaining_matches

PASS = "qoperator-to-qdq"
QTYPES = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def _t(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _qparams(rng, prefix, qtype, size=1, symmetric=True):
    """Scale and zero point: TensorRT's symmetric ones (INT8 0, UINT8 128: what the pass rewrites)
    or, with ``symmetric=False``, any."""
    lo, hi = np.iinfo(qtype).min, np.iinfo(qtype).max
    if symmetric:
        zero = np.full(size, 0 if qtype == np.int8 else 128, qtype)
    else:
        zero = rng.integers(lo // 2, hi // 2 + 1, size).astype(qtype)
    scale = rng.uniform(0.01, 0.1, size).astype(np.float32)
    if size == 1:
        zero, scale = zero.reshape(()), scale.reshape(())
    return [_t(f"{prefix}_scale", scale), _t(f"{prefix}_zero", zero)]


def _qdata(rng, shape, qtype):
    info = np.iinfo(qtype)
    return rng.integers(info.min, info.max + 1, shape).astype(qtype)


def _run_and_compare(m, feeds):
    before = ort_run(m, feeds)
    result = passes.get(PASS).apply(m)
    assert result.rewritten > 0 and remaining_matches(result.model, PASS) == []
    after = ort_run(result.model, feeds)
    for want, got in zip(before, after, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max(initial=0) <= 1  # one quantization step
    return result


@settings(max_examples=30, deadline=None)
@given(xtype=st.sampled_from([np.int8, np.uint8]), per_channel=st.booleans(), bias=st.booleans(), group=st.sampled_from([1, 2]),
       stride=st.integers(1, 2), seed=st.integers(0, 1000))
def test_qlinearconv_matches_onnxruntime(xtype, per_channel, bias, group, stride, seed):
    rng = np.random.default_rng(seed)
    cout = 4
    inits = _qparams(rng, "x", xtype) + [_t("w", _qdata(rng, [cout, 4 // group, 3, 3], np.int8))]
    inits += _qparams(rng, "w", np.int8, cout if per_channel else 1)
    inits[-1] = _t("w_zero", np.zeros(cout if per_channel else (), np.int8))  # onnxruntime takes symmetric weights only
    inits += _qparams(rng, "y", xtype) + [_t("b", rng.integers(-500, 500, cout).astype(np.int32))]
    names = ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero"] + (["b"] if bias else [])
    node = helper.make_node("QLinearConv", names, ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride], group=group)
    out = 6 if stride == 1 else 3
    m = ms_model([node], [vi("x", xtype, [1, 4, 6, 6])], [vi("y", xtype, [1, cout, out, out])], inits, opset=13)
    _run_and_compare(m, {"x": _qdata(rng, [1, 4, 6, 6], xtype)})


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(["QLinearMatMul", "QLinearAdd", "QLinearMul"]), xtype=st.sampled_from([np.int8, np.uint8]),
       seed=st.integers(0, 1000))
def test_binary_qoperators_match_onnxruntime(op, xtype, seed):
    rng = np.random.default_rng(seed)
    b_shape = [5, 3] if op == "QLinearMatMul" else [4, 5]
    y_shape = [2, 4, 3] if op == "QLinearMatMul" else [2, 4, 5]
    btype = np.int8 if op == "QLinearMatMul" else xtype
    inits = _qparams(rng, "a", xtype) + [_t("b", _qdata(rng, b_shape, btype))] + _qparams(rng, "b", btype) + _qparams(rng, "y", xtype)
    names = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"]
    node = helper.make_node(op, names, ["y"], domain="" if op == "QLinearMatMul" else "com.microsoft")
    m = ms_model([node], [vi("a", xtype, [2, 4, 5])], [vi("y", xtype, y_shape)], inits, opset=13)
    _run_and_compare(m, {"a": _qdata(rng, [2, 4, 5], xtype)})


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(["QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearGlobalAveragePool", "QLinearAveragePool"]),
       xtype=st.sampled_from([np.int8, np.uint8]), seed=st.integers(0, 1000))
def test_unary_qoperators_match_onnxruntime(op, xtype, seed):
    rng = np.random.default_rng(seed)
    attrs = {"QLinearLeakyRelu": {"alpha": 0.2}, "QLinearSoftmax": {"axis": -1, "opset": 13},
             "QLinearAveragePool": {"kernel_shape": [2, 2], "strides": [2, 2]}}.get(op, {})
    y_shape = {"QLinearGlobalAveragePool": [1, 3, 1, 1], "QLinearAveragePool": [1, 3, 2, 2]}.get(op, [1, 3, 4, 4])
    inits = _qparams(rng, "x", xtype) + _qparams(rng, "y", xtype)
    node = helper.make_node(op, ["x", "x_scale", "x_zero", "y_scale", "y_zero"], ["y"], domain="com.microsoft", **attrs)
    m = ms_model([node], [vi("x", xtype, [1, 3, 4, 4])], [vi("y", xtype, y_shape)], inits, opset=13)
    _run_and_compare(m, {"x": _qdata(rng, [1, 3, 4, 4], xtype)})


@settings(max_examples=15, deadline=None)
@given(xtype=st.sampled_from([np.int8, np.uint8]), seed=st.integers(0, 1000))
def test_qlinearconcat_and_qgemm_match_onnxruntime(xtype, seed):
    rng = np.random.default_rng(seed)
    inits = _qparams(rng, "y", xtype) + _qparams(rng, "p", xtype) + _qparams(rng, "q", xtype)
    concat = helper.make_node("QLinearConcat", ["y_scale", "y_zero", "p", "p_scale", "p_zero", "q", "q_scale", "q_zero"], ["c"],
                              domain="com.microsoft", axis=1)
    inits += [_t("w", _qdata(rng, [6, 4], np.int8)), _t("w_scale", np.float32(0.05)), _t("w_zero", np.int8(0)),
              _t("bias", rng.integers(-300, 300, 4).astype(np.int32))] + _qparams(rng, "g", xtype)
    gemm = helper.make_node("QGemm", ["c", "y_scale", "y_zero", "w", "w_scale", "w_zero", "bias", "g_scale", "g_zero"], ["y"],
                            domain="com.microsoft")
    m = ms_model([concat, gemm], [vi("p", xtype, [2, 3]), vi("q", xtype, [2, 3])], [vi("y", xtype, [2, 4])], inits, opset=13)
    _run_and_compare(m, {"p": _qdata(rng, [2, 3], xtype), "q": _qdata(rng, [2, 3], xtype)})


@pytest.mark.parametrize("trt", ["8.6", "10.1"])
def test_check_names_the_pass_and_auto_writes_qdq(trt):
    rng = np.random.default_rng(0)
    inits = _qparams(rng, "a", np.int8) + [_t("b", _qdata(rng, [5, 3], np.int8)), _t("b_scale", np.float32(0.05)),
                                           _t("b_zero", np.int8(0))] + _qparams(rng, "y", np.int8)
    for t in inits:
        if t.name.endswith("_zero"):
            t.CopyFrom(_t(t.name, np.int8(0)))
    node = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"], ["y"])
    m = ms_model([node], [vi("a", np.int8, [2, 5])], [vi("y", np.int8, [2, 3])], inits, opset=13)
    assert [f.fix_pass for f in check_model(m, trt).findings if f.severity == "blocking"] == [PASS]
    result = graphfix.fix(m, "auto", trt=trt)
    assert result.report.status == "ok"
    assert sorted({n.op_type for n in result.model.graph.node}) == ["DequantizeLinear", "MatMul", "QuantizeLinear"]


def test_asymmetric_zero_points_are_left_for_checks_remedy():
    """A zero point other than 0 (INT8) or 128 (UINT8) has no exact Q/DQ form TensorRT reads."""
    rng = np.random.default_rng(1)
    inits = _qparams(rng, "a", np.uint8, symmetric=False) + [_t("b", _qdata(rng, [5, 3], np.int8)),
                                                              _t("b_scale", np.float32(0.05)), _t("b_zero", np.int8(0))]
    inits += _qparams(rng, "y", np.uint8, symmetric=False)
    node = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"], ["y"])
    m = ms_model([node], [vi("a", np.uint8, [2, 5])], [vi("y", np.uint8, [2, 3])], inits, opset=13)
    assert passes.get(PASS).apply(m).matched == 0
    (finding,) = [f for f in check_model(m, "10.1").findings if f.severity == "blocking"]
    assert finding.fix_pass is None and "QDQ" in finding.message and finding.opt_in == "--requantize-symmetric"
