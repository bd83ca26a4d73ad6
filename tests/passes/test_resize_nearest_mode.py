"""resize-nearest-mode: nearest Resize in an accepted attribute pair or as constant-index Gathers, exactly onnxruntime's output for
every coordinate mode and rounding, up/down and fractional scales, float and integer data; the
official nearest node cases; the rule's release range; tf2onnx's exports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphfix
from graphfix.check.findings import check_model
from tests.helpers.support import case_feeds, check_rewrite, freeze_inputs, node_cases, ort_run, runnable

PASS = "resize-nearest-mode"
REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn"]
ROUNDING = ["floor", "ceil", "round_prefer_floor", "round_prefer_ceil"]
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.uint8: TensorProto.UINT8, np.int32: TensorProto.INT32}


def _resize(dims, scales, mode, rounding, dtype, opset=13):
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest", coordinate_transformation_mode=mode,
                            nearest_mode=rounding)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", ELEM[dtype], dims)],
                              [helper.make_tensor_value_info("y", ELEM[dtype], [int(np.float32(d) * np.float32(s)) for d, s in
                                                                                zip(dims, scales, strict=True)])],
                              [numpy_helper.from_array(np.array([], np.float32), "roi"),
                               numpy_helper.from_array(np.asarray(scales, np.float32), "scales")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


@settings(max_examples=60, deadline=None)
@given(mode=st.sampled_from(MODES), rounding=st.sampled_from(ROUNDING), dtype=st.sampled_from(list(ELEM)),
       h=st.integers(1, 9), w=st.integers(1, 9), sh=st.sampled_from([1.0, 2.0, 3.0, 0.5, 1.5, 0.6, 2.5]),
       sw=st.sampled_from([1.0, 2.0, 0.5, 1.7, 4.0]))
def test_every_nearest_combination_matches_onnxruntime_exactly(mode, rounding, dtype, h, w, sh, sw):
    if int(np.float32(h) * np.float32(sh)) < 1 or int(np.float32(w) * np.float32(sw)) < 1:
        return  # an empty output: nothing to resize
    m = _resize([1, 2, h, w], [1, 1, sh, sw], mode, rounding, dtype)
    x = (np.random.default_rng(h * 10 + w).standard_normal((1, 2, h, w)) * 50).astype(dtype)
    result = check_rewrite(m, PASS, {"x": x}, 0.0, 0.0, force=True)
    resizes = [n for n in result.model.graph.node if n.op_type == "Resize"]
    if mode == "tf_half_pixel_for_nn" and rounding == "floor":  # the same Resize, half_pixel + round_prefer_ceil
        modes = [{a.name: a.s for a in n.attribute} for n in resizes]
        assert modes == [{"mode": b"nearest", "coordinate_transformation_mode": b"half_pixel", "nearest_mode": b"round_prefer_ceil"}] \
            or not resizes
    else:
        assert resizes == []


NEAREST_CASES = [c for c in node_cases("Resize") if any(a.name == "mode" and a.s == b"nearest" for a in c.model.graph.node[0].attribute)
                 and not any(a.name in ("antialias", "keep_aspect_ratio_policy") for a in c.model.graph.node[0].attribute)
                 and "crop_and_resize" not in c.name]


def test_nearest_node_cases_found():
    assert len(NEAREST_CASES) >= 8


@pytest.mark.parametrize("case", NEAREST_CASES, ids=lambda c: c.name)
def test_onnx_nearest_node_cases(case):
    for inputs, expected in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        m = freeze_inputs(runnable(case.model, 18), {k: feeds.pop(k) for k in list(feeds) if k != "X"})
        result = check_rewrite(m, PASS, feeds, 0.0, 0.0, force=True)
        np.testing.assert_array_equal(ort_run(result.model, feeds)[0], expected[0])


@pytest.mark.parametrize("rounding,flagged", [("floor", True), ("ceil", True), ("round_prefer_ceil", True), ("round_prefer_floor", False)])
@pytest.mark.parametrize("trt", ["8.0", "8.5", "8.6", "10.1"])
def test_check_flags_tf_half_pixel_for_nn_unless_round_prefer_floor(trt, rounding, flagged):
    m = _resize([1, 3, 4, 4], [1, 1, 2, 2], "tf_half_pixel_for_nn", rounding, np.float32)
    assert [f.fix_pass for f in check_model(m, trt).findings if f.severity == "blocking"] == ([PASS] if flagged else [])


@pytest.mark.parametrize("name", ["tf2onnx_resize_nearest_op13", "tf2onnx_resize_nearest_op17"])
@pytest.mark.parametrize("trt", ["8.5", "10.1"])
def test_tf2onnx_nearest_resize_is_clean_after_auto(name, trt):
    path = REAL / f"{name}.onnx"
    if not path.exists():
        pytest.skip("tf2onnx fixtures not present")
    result = graphfix.fix(str(path), "auto", trt=trt)
    assert result.report.status == "ok"
    assert not [f for f in check_model(result.model, trt).findings if f.severity == "blocking"]
