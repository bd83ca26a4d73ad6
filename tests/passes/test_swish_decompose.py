"""swish-decompose and swiglu-decompose: fixtures, ONNX Swish/SwiGLU node cases, random shapes/alphas/dtypes, version gating.

onnxruntime 1.32 runs Swish but not opset-28 SwiGLU: SwiGLU is compared with the ONNX reference
evaluator (the op's definition) and the node cases' expected outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx.reference import ReferenceEvaluator

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import (
    assert_outputs_match,
    check_fixture,
    check_node_case,
    check_rewrite,
    node_cases,
    ort_run,
    remaining_matches,
)

SWISH, SWIGLU = "swish-decompose", "swiglu-decompose"
FIXTURES = [fx for group, fx in all_fixtures() if group in ("swish_decompose", "swiglu_decompose")]
ELEM = {np.float32: FLOAT, np.float16: FLOAT16}
TOL = {np.float32: (1e-6, 1e-5), np.float16: (2e-3, 4e-3)}


def _swish(dims, elem=FLOAT, **attrs):
    return model([node("Swish", ["x"], ["y"], **attrs)], [inp("x", elem, dims)], [out("y", elem, dims)], opset=24)


def _swiglu(dims, elem=FLOAT, **attrs):
    return model([node("SwiGLU", ["a", "b"], ["y"], **attrs)], [inp("a", elem, dims), inp("b", elem, dims)],
                 [out("y", elem, dims)], opset=28)


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", [fx for fx in FIXTURES if fx.passes == (SWISH,)], ids=lambda fx: fx.name)
def test_swish_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, SWISH, *TOL[np.float16 if "fp16" in fx.name else np.float32], seed=4)
    assert "Swish" not in _ops(result.model)
    assert not [f for f in check_model(result.model, "10.7").findings if f.severity == "blocking"]


def test_swiglu_fixture_equals_the_reference_evaluator():
    fx = next(fx for fx in FIXTURES if fx.passes == (SWIGLU,))
    m = fx.build()
    result = passes.get(SWIGLU).apply(m)
    assert result.rewritten == 1 and remaining_matches(result.model, SWIGLU) == []
    x = np.random.default_rng(2).standard_normal((2, 5, 16)).astype(np.float32)
    assert_outputs_match(ReferenceEvaluator(m).run(None, {"x": x}), ort_run(result.model, {"x": x}), 1e-6, 1e-5)
    assert not [f for f in check_model(result.model, "10.7").findings if f.severity == "blocking"]


def test_check_flags_the_originals_with_their_passes():
    by_pass = {fx.passes[0]: fx for fx in FIXTURES}
    for name, trt in ((SWISH, "10.16"), (SWIGLU, "11.1")):
        findings = check_model(by_pass[name].build(), trt).findings
        assert [f.fix_pass for f in findings if f.rule == "no-importer"] == [name]


@pytest.mark.parametrize("case", node_cases("Swish") + node_cases("SwiGLU"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    op = case.model.graph.node[0].op_type
    fp16 = "float16" in case.name
    check_node_case(case, SWISH if op == "Swish" else SWIGLU, 24, *(TOL[np.float16] if fp16 else TOL[np.float32]))


@pytest.mark.parametrize("trt,rewritten", [("7.0", 1), ("8.6", 1), ("10.7", 1), ("10.16", 1), ("11.0", 0), ("11.1", 0)])
def test_swish_version_boundaries(trt, rewritten):
    assert passes.get(SWISH).apply(_swish([2, 3]), trt=trt).rewritten == rewritten


@pytest.mark.parametrize("trt", ["7.0", "10.7", "11.1"])
def test_swiglu_is_rewritten_for_every_release(trt):
    assert passes.get(SWIGLU).apply(_swiglu([2, 3]), trt=trt).rewritten == 1


def test_default_alpha_has_no_multiply_and_bfloat16_is_a_finding():
    plain = passes.get(SWISH).apply(_swish([4]))
    assert _ops(plain.model).count("Mul") == 1
    bf16 = passes.get(SWISH).apply(_swish([4], elem=16))
    assert bf16.rewritten == 0 and "bfloat16" in bf16.findings[0].message


def _values(dtype, shape, seed, scale):
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape) * scale
    if x.size:
        x.reshape(-1)[r.integers(0, x.size, max(1, x.size // 5))] = r.choice([np.inf, -np.inf, 0.0, -0.0, 60.0], max(1, x.size // 5))
    return x.astype(dtype)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=0, max_size=4), alpha=st.sampled_from([1.0, 1.702, 0.5, -2.0]),
       dtype=st.sampled_from([np.float32, np.float16]), scale=st.sampled_from([1.0, 8.0]), dynamic=st.booleans(),
       seed=st.integers(0, 2**16))
def test_random_swish_and_swiglu(shape, alpha, dtype, scale, dynamic, seed):
    dims = [f"d{i}" if dynamic else d for i, d in enumerate(shape)]
    x = _values(dtype, shape, seed, scale)
    result = check_rewrite(_swish(dims, ELEM[dtype], alpha=alpha), SWISH, {"x": x}, *TOL[dtype])
    assert "Swish" not in _ops(result.model)
    m = _swiglu(dims, ELEM[dtype], alpha=alpha)
    feeds = {"a": x, "b": _values(dtype, shape, seed + 1, scale)}
    glu = passes.get(SWIGLU).apply(m)
    assert glu.rewritten == 1 and "SwiGLU" not in _ops(glu.model)
    assert_outputs_match(ReferenceEvaluator(m).run(None, feeds), ort_run(glu.model, feeds), *TOL[dtype])
