"""deformconv-decompose: DeformConv against onnxruntime's kernel on random offsets (inside, across
and beyond the borders), masks, groups, offset groups, strides, dilations, pads; fp32 and fp16."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import graphfix
from graphfix.check.findings import check_model
from tests.helpers.support import check_rewrite

PASS = "deformconv-decompose"
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
TOL = {np.float32: (1e-4, 1e-4), np.float16: (2e-2, 2e-2)}


def _model(dtype, n, c, h, w, m, kernel, group, offset_group, stride, dilation, pads, mask, bias):
    kh, kw = kernel
    ho = (h + pads[0] + pads[2] - (dilation * (kh - 1) + 1)) // stride + 1
    wo = (w + pads[1] + pads[3] - (dilation * (kw - 1) + 1)) // stride + 1
    names = ["x", "w", "offset", "b" if bias else "", "mask" if mask else ""]
    while names[-1] == "":
        names.pop()
    elem = ELEM[dtype]
    ins = [helper.make_tensor_value_info("x", elem, ["n", c, h, w]), helper.make_tensor_value_info("w", elem, [m, c // group, kh, kw]),
           helper.make_tensor_value_info("offset", elem, ["n", offset_group * kh * kw * 2, ho, wo])]
    ins += [helper.make_tensor_value_info("b", elem, [m])] if bias else []
    ins += [helper.make_tensor_value_info("mask", elem, ["n", offset_group * kh * kw, ho, wo])] if mask else []
    node = helper.make_node("DeformConv", names, ["y"], kernel_shape=[kh, kw], group=group, offset_group=offset_group,
                            strides=[stride, stride], dilations=[dilation, dilation], pads=list(pads))
    graph = helper.make_graph([node], "deform", ins, [helper.make_tensor_value_info("y", elem, ["n", m, ho, wo])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(dtype), "w": (0.3 * rng.standard_normal((m, c // group, kh, kw))).astype(dtype),
             "offset": (3 * rng.standard_normal((n, offset_group * kh * kw * 2, ho, wo))).astype(dtype),
             "b": rng.standard_normal(m).astype(dtype), "mask": rng.uniform(0, 1, (n, offset_group * kh * kw, ho, wo)).astype(dtype)}
    return model, {k: v for k, v in feeds.items() if k in names}


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from([np.float32, np.float32, np.float16]), n=st.integers(1, 2), groups=st.sampled_from([(1, 1), (2, 1), (1, 2), (2, 2)]),
       kernel=st.sampled_from([(3, 3), (1, 1), (2, 3)]), stride=st.integers(1, 2), dilation=st.integers(1, 2),
       pads=st.sampled_from([(0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 2, 1)]), mask=st.booleans(), bias=st.booleans())
def test_deformconv_matches_onnxruntime(dtype, n, groups, kernel, stride, dilation, pads, mask, bias):
    group, offset_group = groups
    model, feeds = _model(dtype, n, 4, 6, 7, 4, kernel, group, offset_group, stride, dilation, pads, mask, bias)
    try:
        result = check_rewrite(model, PASS, feeds, *TOL[dtype])
    except Exception as exc:
        if "NOT_IMPLEMENTED" in str(exc):
            pytest.skip("onnxruntime has no DeformConv kernel for this type")
        raise
    assert "DeformConv" not in [nd.op_type for nd in result.model.graph.node]


@pytest.mark.parametrize("trt,rewritten", [("8.6", True), ("10.0", True), ("10.1", False)])
def test_auto_decomposes_only_before_10_1(trt, rewritten):
    model, _ = _model(np.float32, 1, 4, 6, 7, 4, (3, 3), 1, 1, 1, 1, (1, 1, 1, 1), True, True)
    assert bool([f for f in check_model(model, trt).findings if f.fix_pass == PASS]) == rewritten
    result = graphfix.fix(model, "auto", trt=trt)
    assert ("DeformConv" in [nd.op_type for nd in result.model.graph.node]) != rewritten
    assert result.report.status == "ok"
