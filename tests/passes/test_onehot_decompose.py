"""onehot-decompose: fixtures, ONNX OneHot node cases, version boundaries, random axes/depths/types."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT32, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "onehot_decompose"}
INSIDE = ["7.0", "7.2", "8.0", "8.2", "8.4", "8.4.3"]
ELEM = {np.dtype(np.int32): INT32, np.dtype(np.int64): INT64, np.dtype(np.float32): FLOAT}


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "onehot-decompose")
    assert "OneHot" not in _ops(result.model)
    for version in INSIDE:
        assert not [f for f in check_model(result.model, version).findings if f.rule == "no-importer"], version


@pytest.mark.parametrize("version,constant_depth,dynamic_depth", [
    *[(v, True, True) for v in INSIDE], ("8.5", False, True), ("8.5.3", False, True), ("8.6", False, False), ("10.1", False, False),
])
def test_version_boundaries(version, constant_depth, dynamic_depth):
    for name, rewrites in (("one_hot_labels", constant_depth), ("label_smoothing_dynamic_classes", dynamic_depth)):
        result = passes.get("onehot-decompose").apply(FIXTURES[name].build(), trt=version)
        assert (result.rewritten > 0) == rewrites, name


@pytest.mark.parametrize("case", node_cases("OneHot"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 11)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        try:
            result = check_rewrite(m, "onehot-decompose", feeds)
        except Exception as exc:  # noqa: BLE001
            if "bfloat16" in case.name and "NOT_IMPLEMENTED" in str(exc):
                pytest.skip(f"onnxruntime has no bfloat16 kernel for {case.name}: {exc}")
            raise
        assert "OneHot" not in _ops(result.model)
        np.testing.assert_array_equal(ort_run(result.model, feeds)[0], expected[0])


#: (indices, values, depth) types onnxruntime implements OneHot for
ORT_TYPES = [(np.int64, np.int64, np.int64), (np.int64, np.int32, np.float32), (np.int64, np.float32, np.int64),
             (np.int64, np.float32, np.int32), (np.int32, np.float32, np.int32), (np.int32, np.float32, np.float32),
             (np.float32, np.int64, np.int64), (np.float32, np.float32, np.float32)]


@st.composite
def onehot_cases(draw):
    shape = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
    axis = draw(st.integers(-len(shape) - 1, len(shape)))
    return shape, axis, draw(st.integers(1, 6)), draw(st.booleans()), draw(st.sampled_from(ORT_TYPES)), draw(st.integers(0, 2**31))


def _check_random(shape, axis, depth, depth_const, types, seed):
    idx_type, val_type, depth_type = types
    rng = np.random.default_rng(seed)
    idx = rng.integers(-depth - 2, depth + 2, shape).astype(idx_type)
    if idx_type is np.float32:
        idx = idx + rng.uniform(-0.9, 0.9, shape).astype(np.float32)  # truncated toward zero, as a Cast does
    values = rng.integers(-5, 5, 2).astype(val_type)
    inits, inputs, feeds = [init("values", values)], [inp("idx", ELEM[np.dtype(idx_type)], shape)], {"idx": idx}
    if depth_const:
        inits.append(init("depth", depth, depth_type))
    else:
        inputs.append(inp("depth", ELEM[np.dtype(depth_type)], []))
        feeds["depth"] = np.array(depth, depth_type)
    m = model([node("OneHot", ["idx", "depth", "values"], ["y"], axis=axis)], inputs,
              [out("y", ELEM[np.dtype(val_type)], ["?"] * (len(shape) + 1))], inits, opset=11)
    result = check_rewrite(m, "onehot-decompose", feeds)
    assert "OneHot" not in _ops(result.model)


@settings(max_examples=40, deadline=None)
@given(onehot_cases())
def test_random_onehot_equals_onnxruntime(case):
    _check_random(*case)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(onehot_cases())
def test_random_onehot_equals_onnxruntime_slow(case):
    _check_random(*case)


def test_onehot_into_tile_repeats_is_rewritten_where_onehot_is_imported():
    """IOneHotLayer cannot compute a shape tensor: SAM's repeat counts are rewritten at 8.6 and 10.1
    too, while a OneHot on data is left to the importer there."""
    for version in ("8.6", "10.1"):
        result = passes.get("onehot-decompose").apply(FIXTURES["sam_repeat_counts"].build(), trt=version)
        assert result.rewritten == 1 and "OneHot" not in [n.op_type for n in result.model.graph.node]
        assert passes.get("onehot-decompose").apply(FIXTURES["one_hot_labels"].build(), trt=version).rewritten == 0
