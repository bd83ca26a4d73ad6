"""trilu-decompose: fixtures, ONNX Trilu node cases, version boundaries, random shapes/k/upper."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, FLOAT16, INT32, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    freeze_inputs,
    node_cases,
    ort_run,
    runnable,
)

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "trilu_decompose"}
INSIDE, OUTSIDE = ["7.2-ngc21.05", "8.0", "8.2", "8.4", "8.4.3"], ["8.6", "10.1"]
ELEM = {np.float32: FLOAT, np.float16: FLOAT16, np.int32: INT32, np.int64: INT64, np.bool_: BOOL}


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "trilu-decompose")
    assert "Trilu" not in _ops(result.model)
    for version in INSIDE:
        assert not [f for f in check_model(result.model, version).findings if f.rule == "no-importer"], version


def test_causal_mask_keeps_minus_inf_above_the_diagonal_without_nan():
    m = FIXTURES["causal_mask_dynamic"].build()
    x = np.random.default_rng(0).standard_normal((2, 6, 8)).astype(np.float32)
    result = check_rewrite(m, "trilu-decompose", {"x": x})
    attn = ort_run(result.model, {"x": x})[0]
    assert not np.isnan(attn).any()
    np.testing.assert_array_equal(attn[:, np.tril_indices(6, -1)[0], np.tril_indices(6, -1)[1]] > 0, True)
    np.testing.assert_array_equal(attn[:, np.triu_indices(6, 1)[0], np.triu_indices(6, 1)[1]], 0)


@pytest.mark.parametrize("version,rewrites", [(v, True) for v in INSIDE] + [(v, False) for v in OUTSIDE])
def test_version_boundaries_rank2(version, rewrites):
    result = passes.get("trilu-decompose").apply(FIXTURES["causal_mask_dynamic"].build(), trt=version)
    assert (result.rewritten > 0) == rewrites


@pytest.mark.parametrize("version,rewrites", [("8.4.3", True), ("8.5", True), ("8.5.3", True), ("8.6", False), ("10.1", False)])
def test_rank4_is_rewritten_for_8_5(version, rewrites):
    result = passes.get("trilu-decompose").apply(FIXTURES["batched_triu_rank4"].build(), trt=version)
    assert (result.rewritten > 0) == rewrites
    rank3 = passes.get("trilu-decompose").apply(FIXTURES["kv_cache_tril_bool"].build(), trt=version)
    assert (rank3.rewritten > 0) == (version == "8.4.3")


@pytest.mark.parametrize("case", node_cases("Trilu"), ids=lambda c: c.name)
@pytest.mark.parametrize("k_as", ["input", "initializer"])
def test_onnx_node_cases(case, k_as):
    m = runnable(case.model, 14)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        if k_as == "initializer" and len(feeds) == 2:
            k_name = m.graph.node[0].input[1]
            m = freeze_inputs(m, {k_name: feeds.pop(k_name)})
        result = check_rewrite(m, "trilu-decompose", feeds)
        assert "Trilu" not in _ops(result.model)
        np.testing.assert_array_equal(ort_run(result.model, feeds)[0], expected[0])


@st.composite
def trilu_cases(draw):
    shape = draw(st.lists(st.integers(0, 6), min_size=2, max_size=4))
    return (shape, draw(st.integers(-8, 8)), draw(st.booleans()), draw(st.sampled_from(["none", "const", "input"])),
            draw(st.booleans()), draw(st.sampled_from(list(ELEM))), draw(st.integers(0, 2**31)))


def _check_random(shape, k, upper, k_as, dynamic, dtype, seed):
    dims = [f"d{i}" for i in range(len(shape))] if dynamic else shape
    inputs, inits, names = [inp("x", ELEM[dtype], dims)], [], ["x"]
    if k_as == "const":
        inits, names = [init("k", k, np.int64)], ["x", "k"]
    elif k_as == "input":
        inputs, names = [*inputs, inp("k", INT64, [])], ["x", "k"]
    m = model([node("Trilu", names, ["y"], upper=int(upper))], inputs, [out("y", ELEM[dtype], dims)], inits)
    rng = np.random.default_rng(seed)
    x = rng.random(shape) < 0.6 if dtype is np.bool_ else (rng.standard_normal(shape) * 5).astype(dtype)
    if dtype is np.float32 and x.size:
        x.flat[rng.integers(0, x.size)] = -np.inf  # Where, not a product: -inf outside the triangle is 0, not NaN
    feeds = {"x": x, "k": np.array(k, np.int64)} if k_as == "input" else {"x": x}
    result = check_rewrite(m, "trilu-decompose", feeds)
    assert "Trilu" not in _ops(result.model)
    kk = 0 if k_as == "none" else k
    want = np.triu(x, kk) if upper else np.tril(x, kk)
    np.testing.assert_array_equal(ort_run(result.model, feeds)[0], want)


@settings(max_examples=50, deadline=None)
@given(trilu_cases())
def test_random_trilu_equals_numpy(case):
    _check_random(*case)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(trilu_cases())
def test_random_trilu_equals_numpy_slow(case):
    _check_random(*case)
