"""cumsum-decompose: fixtures, ONNX CumSum node cases, strategy choice, random configurations."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT32, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.passes.cumsum_decompose import BLOCK
from graphfix.verify.inputs import make_inputs
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    freeze_inputs,
    node_cases,
    ort_run,
    runnable,
)

FIXTURES = [fx for group, fx in all_fixtures() if group == "cumsum_decompose"]
ELEM = {np.float32: FLOAT, np.int32: INT32, np.int64: INT64}


def _reference(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    y = np.flip(x, axis) if reverse else x
    acc = np.cumsum(y.astype(np.float64) if x.dtype.kind == "f" else y, axis=axis).astype(x.dtype)
    if exclusive:
        acc = acc - (y)
    return np.flip(acc, axis) if reverse else acc


def _cumsum_model(shape, axis, exclusive, reverse, dtype, dynamic=False):
    dims = [f"d{i}" if dynamic else d for i, d in enumerate(shape)]
    return model(
        [node("CumSum", ["x", "axis"], ["y"], exclusive=int(exclusive), reverse=int(reverse))],
        [inp("x", ELEM[dtype], dims)], [out("y", ELEM[dtype], dims)], [init("axis", axis, np.int64)],
    )


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "cumsum-decompose", atol=1e-4, rtol=1e-4, seed=5)
    assert all(n.op_type != "CumSum" for n in result.model.graph.node)


def test_arange_like_becomes_range():
    fx = next(f for f in FIXTURES if f.name == "superglue_arange_like")
    result = check_rewrite(fx.build(), "cumsum-decompose", make_inputs(fx.build(), fx.input_shapes)[0])
    ops = [n.op_type for n in result.model.graph.node]
    assert "Range" in ops and "Sub" not in ops and "ConstantOfShape" not in ops
    feeds = {"scores": np.zeros((1, 3, 11), np.float32)}
    np.testing.assert_array_equal(ort_run(result.model, feeds)[0], np.arange(11))


@pytest.mark.parametrize("n,matmuls", [(16, 1), (64, 1), (65, 2), (4096, 2), (16384, 3)])
def test_strategy_and_constant_sizes(n, matmuls):
    m = _cumsum_model((2, n), 1, False, False, np.float32)
    result = check_rewrite(m, "cumsum-decompose", {"x": np.random.default_rng(0).random((2, n), np.float32)}, atol=1e-3, rtol=1e-4)
    ops = [x.op_type for x in result.model.graph.node]
    assert ops.count("MatMul") == matmuls
    biggest = max(int(np.prod(t.dims)) for t in result.model.graph.initializer)
    assert biggest <= BLOCK * BLOCK


def test_integer_cumsum_is_exact_and_uses_no_matmul():
    m = _cumsum_model((3, 300), 1, True, True, np.int64)
    x = np.random.default_rng(1).integers(-(2**40), 2**40, (3, 300), dtype=np.int64)
    result = check_rewrite(m, "cumsum-decompose", {"x": x})
    assert "MatMul" not in [n.op_type for n in result.model.graph.node]
    np.testing.assert_array_equal(ort_run(result.model, {"x": x})[0], _reference(x, 1, True, True))


def test_runtime_axis_is_a_finding():
    m = model(
        [node("CumSum", ["x", "axis"], ["y"])],
        [inp("x", FLOAT, [3, 4]), inp("axis", INT64, [])], [out("y", FLOAT, [3, 4])],
    )
    result = passes.get("cumsum-decompose").apply(m)
    assert result.rewritten == 0 and "axis is computed at runtime" in result.findings[0].message


@pytest.mark.parametrize("case", node_cases("CumSum"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    for inputs, expected in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        axis_name = case.model.graph.node[0].input[1]
        m = freeze_inputs(runnable(case.model, 14), {axis_name: feeds.pop(axis_name)})
        result = check_rewrite(m, "cumsum-decompose", feeds)
        assert all(n.op_type != "CumSum" for n in result.model.graph.node)
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)


@settings(max_examples=80, deadline=None)
@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=4).flatmap(
        lambda s: st.tuples(st.just(s), st.integers(-len(s), len(s) - 1))
    ),
    long=st.sampled_from([None, 70, 130, 300]),
    exclusive=st.booleans(),
    reverse=st.booleans(),
    dtype=st.sampled_from([np.float32, np.int32, np.int64]),
    dynamic=st.booleans(),
)
def test_random_cumsum_equals_numpy(shape, long, exclusive, reverse, dtype, dynamic):
    dims, axis = shape
    dims = list(dims)
    if long is not None:
        dims[axis] = long
    m = _cumsum_model(dims, axis, exclusive, reverse, dtype, dynamic)
    rng = np.random.default_rng(len(dims) * 7 + (long or 0))
    x = (rng.standard_normal(dims) * 4).astype(dtype)
    result = check_rewrite(m, "cumsum-decompose", {"x": x}, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], _reference(x, axis % len(dims), exclusive, reverse), atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(n=st.integers(1, 5000), exclusive=st.booleans(), reverse=st.booleans(), dynamic=st.booleans())
def test_random_lengths_slow(n, exclusive, reverse, dynamic):
    m = _cumsum_model((2, n), -1, exclusive, reverse, np.float32, dynamic)
    x = np.random.default_rng(n).standard_normal((2, n)).astype(np.float32)
    result = check_rewrite(m, "cumsum-decompose", {"x": x}, atol=1e-3, rtol=1e-4)
    assert onnx.checker.check_model(result.model) is None
