"""xor-decompose: fixtures, ONNX Xor node cases, version boundaries, random shapes/broadcasting."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

FIXTURES = [fx for group, fx in all_fixtures() if group == "xor_decompose"]
INSIDE, OUTSIDE = ["7.0", "7.2", "8.0", "8.2"], ["8.4-EA", "8.4", "8.6", "10.1"]


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "xor-decompose")
    assert "Xor" not in _ops(result.model)
    for version in INSIDE:
        assert not [f for f in check_model(result.model, version).findings if f.rule == "no-importer"], version


def test_legacy_floor_divide_is_python_floor_division():
    fx = next(f for f in FIXTURES if f.name == "legacy_floor_divide")
    idx = np.arange(-30, 30, dtype=np.int64)
    result = check_rewrite(fx.build(), "xor-decompose", {"idx": idx})
    row, col = ort_run(result.model, {"idx": idx})
    np.testing.assert_array_equal(row, idx // 7)
    np.testing.assert_array_equal(col, idx % 7)


@pytest.mark.parametrize("version,rewrites", [(v, True) for v in INSIDE] + [(v, False) for v in OUTSIDE])
def test_version_boundaries(version, rewrites):
    result = passes.get("xor-decompose").apply(FIXTURES[0].build(), trt=version)
    assert (result.rewritten > 0) == rewrites
    assert ("Xor" in _ops(result.model)) != rewrites


@pytest.mark.parametrize("case", node_cases("Xor"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 7)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        result = check_rewrite(m, "xor-decompose", feeds)
        assert "Xor" not in _ops(result.model)
        np.testing.assert_array_equal(ort_run(result.model, feeds)[0], expected[0])


@st.composite
def xor_cases(draw):
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=5))
    other = [d if draw(st.booleans()) else 1 for d in shape][draw(st.integers(0, len(shape))):]
    if draw(st.booleans()):
        shape, other = other, shape
    return shape, other, draw(st.integers(0, 2**31))


def _check_random(a_shape, b_shape, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.random(a_shape) < 0.5, rng.random(b_shape) < 0.5
    out_shape = list(np.broadcast_shapes(tuple(a_shape), tuple(b_shape)))
    m = model([node("Xor", ["a", "b"], ["c"])], [inp("a", BOOL, a_shape), inp("b", BOOL, b_shape)], [out("c", BOOL, out_shape)])
    result = check_rewrite(m, "xor-decompose", {"a": a, "b": b})
    assert "Xor" not in _ops(result.model)
    np.testing.assert_array_equal(ort_run(result.model, {"a": a, "b": b})[0], np.logical_xor(a, b))


@settings(max_examples=40, deadline=None)
@given(xor_cases())
def test_random_xor_equals_numpy(case):
    _check_random(*case)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(xor_cases())
def test_random_xor_equals_numpy_slow(case):
    _check_random(*case)
