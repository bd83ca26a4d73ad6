"""cumprod-decompose: fixtures, ONNX CumProd node cases, the exact chain / exact integer scan, random configurations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT32, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.passes.cumprod_decompose import CHAIN
from tests.helpers.support import check_fixture, check_node_case, check_rewrite, node_cases, ort_run

PASS = "cumprod-decompose"
FIXTURES = [fx for group, fx in all_fixtures() if group == "cumprod_decompose"]
ELEM = {np.float32: FLOAT, np.int32: INT32, np.int64: INT64}


def _cumprod(dims, axis, exclusive, reverse, dtype, axis_input=False):
    return model(
        [node("CumProd", ["x", "axis"], ["y"], exclusive=int(exclusive), reverse=int(reverse))],
        [inp("x", ELEM[dtype], dims)] + ([inp("axis", INT64, [])] if axis_input else []), [out("y", ELEM[dtype], dims)],
        [] if axis_input else [init("axis", axis, np.int64)], opset=26,
    )


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, PASS, atol=0, rtol=1e-5, seed=5)
    assert "CumProd" not in _ops(result.model)
    for v in ("8.6", "10.1", "10.7"):
        assert not [f for f in check_model(result.model, v).findings if f.severity == "blocking"], v


def test_check_flags_the_original_for_every_release():
    for v in ("7.0", "10.7", "11.1"):
        assert [f.fix_pass for f in check_model(FIXTURES[0].build(), v).findings if f.rule == "no-importer"] == [PASS]


@pytest.mark.parametrize("case", node_cases("CumProd"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    check_node_case(case, PASS, 26, 0, 0, freeze=("axis",))


def test_static_float_chain_is_bit_exact_even_where_partial_products_overflow():
    """[1e30, 1e30, 1e-30]: the sequential product overflows to inf at the second place; only the
    op's own order gives that (a log-step scan would give 1e30 at the third)."""
    m = _cumprod([5], 0, False, False, np.float32)
    x = np.array([1e30, 1e30, 1e-30, 0.0, -2.0], np.float32)
    result = check_rewrite(m, PASS, {"x": x}, 0, 0)
    np.testing.assert_array_equal(ort_run(result.model, {"x": x})[0], ort_run(m, {"x": x})[0])
    assert "Where" not in _ops(result.model)  # the chain, not the scan


def test_integer_scan_wraps_exactly_like_the_op():
    m = _cumprod([2, 70], 1, False, True, np.int32)
    x = np.random.default_rng(1).integers(-9, 9, (2, 70)).astype(np.int32)
    result = check_rewrite(m, PASS, {"x": x}, 0, 0)
    assert "Where" in _ops(result.model)


def test_runtime_axis_is_a_finding():
    result = passes.get(PASS).apply(_cumprod([3, 4], 0, False, False, np.float32, axis_input=True))
    assert result.rewritten == 0 and "axis is computed at runtime" in result.findings[0].message


def _check_random(shape, axis, exclusive, reverse, dtype, dynamic, seed):
    dims = [f"d{i}" if dynamic else d for i, d in enumerate(shape)]
    r = np.random.default_rng(seed)
    if dtype == np.float32:
        x = r.uniform(0.8, 1.25, shape) * r.choice([-1, 1], shape)
        if x.size and seed % 3 == 0:
            x.reshape(-1)[r.integers(0, x.size)] = r.choice([0.0, np.inf, np.nan])
    else:
        x = r.integers(-50, 50, shape)
    x = np.asarray(x, dtype)
    n = shape[axis]
    # exact: the chain (static float, n <= CHAIN) and the integer scan; the float scan is within rounding
    tol = (0, 0) if dtype != np.float32 or (not dynamic and n <= CHAIN) else (0, 2e-6 * max(n, 1))
    result = check_rewrite(_cumprod(dims, axis - len(shape) if seed % 2 else axis, exclusive, reverse, dtype),
                           PASS, {"x": x}, *tol)
    assert "CumProd" not in _ops(result.model)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.sampled_from([1, 2, 3, 7, 64, 65, 130]), min_size=1, max_size=3), data=st.data(),
       exclusive=st.booleans(), reverse=st.booleans(), dtype=st.sampled_from([np.float32, np.int32, np.int64]),
       dynamic=st.booleans(), seed=st.integers(0, 2**16))
def test_random_cumprod_equals_onnxruntime(shape, data, exclusive, reverse, dtype, dynamic, seed):
    if np.prod(shape) > 4000:
        shape = shape[-2:]
    axis = data.draw(st.integers(0, len(shape) - 1))
    _check_random(shape, axis, exclusive, reverse, dtype, dynamic, seed)
