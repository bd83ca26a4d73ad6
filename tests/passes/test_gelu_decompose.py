"""gelu-decompose: fixtures, ONNX Gelu node cases, random shapes/modes/dtypes vs onnxruntime's Gelu, version gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

FIXTURES = [fx for group, fx in all_fixtures() if group == "gelu_decompose"]
PASS = "gelu-decompose"
ELEM = {np.float32: FLOAT, np.float16: FLOAT16}
#: (atol, rtol): fp16 computes in fp16 (1 + erf loses ~2 ulps near erf = -1), onnxruntime in fp32.
TOL = {np.float32: (1e-6, 1e-5), np.float16: (2e-3, 4e-3)}


def _gelu(mode: str, dims: list, elem: int = FLOAT):
    return model([node("Gelu", ["x"], ["y"], approximate=mode)], [inp("x", elem, dims)], [out("y", elem, dims)], opset=20)


def _microsoft_gelu():
    """onnxruntime's transformer optimizer writes com.microsoft::Gelu (no attribute)."""
    n = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([n], "g", [inp("x", FLOAT, [2, 3])], [out("y", FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, PASS, atol=1e-6, rtol=1e-5, seed=4)
    assert "Gelu" not in _ops(result.model)
    for v in ("7.0", "8.0", "8.2", "8.5", "9.3"):
        assert not [f for f in check_model(result.model, v).findings if f.rule == "no-importer"], v


def test_check_flags_the_original():
    """The check the test above relies on does see Gelu before the rewrite."""
    findings = check_model(FIXTURES[0].build(), "8.5").findings
    assert [f.fix_pass for f in findings if f.rule == "no-importer"] == [PASS]


@pytest.mark.parametrize("case", node_cases("Gelu"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 20)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        result = check_rewrite(m, PASS, feeds, atol=1e-6, rtol=1e-5)
        assert "Gelu" not in _ops(result.model)
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("trt,rewritten", [("6.0", 0), ("7.0", 1), ("8.2", 1), ("8.5", 1), ("9.3", 1), ("10.0-EA", 0),
                                           ("10.0", 0), ("10.1", 0), ("11.1", 0)])
def test_version_boundaries(trt, rewritten):
    assert passes.get(PASS).apply(_gelu("tanh", [2, 3]), trt=trt).rewritten == rewritten


def test_unknown_mode_and_bfloat16_are_findings_and_custom_domain_is_left_alone():
    bad = passes.get(PASS).apply(_gelu("erf", [2, 3]))
    assert bad.rewritten == 0 and "not a Gelu mode" in bad.findings[0].message
    bf16 = passes.get(PASS).apply(_gelu("none", [2, 3], elem=16))
    assert bf16.rewritten == 0 and "bfloat16" in bf16.findings[0].message
    ms = passes.get(PASS).apply(_microsoft_gelu())
    assert ms.matched == 0


def test_fp16_stays_fp16_and_does_not_overflow():
    m = _gelu("none", [6], FLOAT16)
    x = np.array([60000, -60000, 40000, np.inf, -3.5, 0.25], np.float16)
    result = check_rewrite(m, PASS, {"x": x}, *TOL[np.float16])
    assert {t.data_type for t in result.model.graph.initializer} == {FLOAT16}
    assert ort_run(result.model, {"x": x})[0][0] == np.float16(60000)


def _values(dtype, shape, seed: int, scale: float, specials: bool) -> np.ndarray:
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape) * scale
    if specials and x.size:
        pool = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e4 if dtype == np.float16 else 3e7]
        flat = x.reshape(-1)
        picks = r.integers(0, flat.size, max(1, flat.size // 4))
        flat[picks] = r.choice(pool, picks.size)
    return np.asarray(x, dtype)


def _check_random(shape, mode, dtype, scale, specials, dynamic, seed):
    dims = [f"d{i}" if dynamic else d for i, d in enumerate(shape)]
    m = _gelu(mode, dims, ELEM[dtype])
    x = _values(dtype, shape, seed, scale, specials)
    result = check_rewrite(m, PASS, {"x": x}, *TOL[dtype])
    assert "Gelu" not in _ops(result.model)


CONFIG = dict(
    shape=st.lists(st.integers(1, 6), min_size=0, max_size=4),
    mode=st.sampled_from(["none", "tanh"]),
    dtype=st.sampled_from([np.float32, np.float16]),
    scale=st.sampled_from([0.5, 3.0, 30.0]),
    specials=st.booleans(),
    dynamic=st.booleans(),
    seed=st.integers(0, 2**16),
)


@settings(max_examples=40, deadline=None)
@given(**CONFIG)
def test_random_gelu_equals_onnxruntime(shape, mode, dtype, scale, specials, dynamic, seed):
    _check_random(shape, mode, dtype, scale, specials, dynamic, seed)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(**CONFIG)
def test_random_gelu_equals_onnxruntime_slow(shape, mode, dtype, scale, specials, dynamic, seed):
    _check_random(shape, mode, dtype, scale, specials, dynamic, seed)
