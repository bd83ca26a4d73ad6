"""qdq-uint8-to-int8: UINT8 Q/DQ with zero point 128 rewritten as INT8 with zero point 0, bit for
bit the same outputs on onnxruntime; any other zero point is left for `check`'s remedy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphfix
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import ort_run, remaining_matches

PASS = "qdq-uint8-to-int8"


def _t(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _model(zero=128, per_channel=False, seed=0, weight_zero=128):
    rng = np.random.default_rng(seed)
    cout = 3
    wz = np.full(cout, weight_zero, np.uint8) if per_channel else np.uint8(weight_zero)
    ws = rng.uniform(0.01, 0.05, cout).astype(np.float32) if per_channel else np.float32(0.03)
    inits = [_t("xs", np.float32(0.05)), _t("xz", np.uint8(zero)), _t("w", rng.integers(0, 256, (cout, 2, 3, 3)).astype(np.uint8)),
             _t("ws", ws), _t("wz", wz)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 5, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


@settings(max_examples=20, deadline=None)
@given(per_channel=st.booleans(), seed=st.integers(0, 1000), scale=st.sampled_from([0.5, 3.0, 20.0]))
def test_zero_point_128_becomes_int8_zero_with_the_same_outputs(per_channel, seed, scale):
    m = _model(per_channel=per_channel, seed=seed)
    x = (scale * np.random.default_rng(seed).standard_normal((1, 2, 5, 5))).astype(np.float32)  # saturating values too
    result = passes.get(PASS).apply(m)
    assert result.rewritten == 2 and remaining_matches(result.model, PASS) == []
    types = {t.name: t.data_type for t in result.model.graph.initializer}
    assert TensorProto.UINT8 not in types.values()
    np.testing.assert_array_equal(ort_run(result.model, {"x": x})[0], ort_run(m, {"x": x})[0])


@pytest.mark.parametrize("trt", ["8.2", "8.6", "10.1"])
def test_check_names_the_pass_and_auto_leaves_no_uint8(trt):
    m = _model()
    assert PASS in {f.fix_pass for f in check_model(m, trt).findings}
    result = graphfix.fix(m, "auto", trt=trt)
    assert result.report.status == "ok"
    assert not [f for f in check_model(result.model, trt).findings if f.severity == "blocking" or f.rule == "wrong-results"]


def test_other_zero_points_are_not_rewritten():
    m = _model(zero=37, weight_zero=100)
    assert passes.get(PASS).apply(m).rewritten == 0
