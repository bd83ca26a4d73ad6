"""rmsnorm-decompose: fixtures, ONNX RMSNormalization node cases, random shapes/axes/dtypes vs onnxruntime, version gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import check_fixture, check_node_case, check_rewrite, node_cases

PASS = "rmsnorm-decompose"
FIXTURES = [fx for group, fx in all_fixtures() if group == "rmsnorm_decompose"]
ELEM = {np.float32: FLOAT, np.float16: FLOAT16}
#: (atol, rtol): fp16 X is normalised in float32 and cast back, as onnxruntime does.
TOL = {np.float32: (1e-5, 1e-5), np.float16: (2e-3, 2e-3)}


def _rms(dims, axis, dtype=np.float32, scale_shape=None, **attrs):
    r = np.random.default_rng(0)
    scale_shape = scale_shape if scale_shape is not None else [d if isinstance(d, int) else 1 for d in dims[axis:]]
    return model([node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, **attrs)], [inp("x", ELEM[dtype], dims)],
                 [out("y", ELEM[dtype], dims)], [init("scale", 1 + 0.1 * r.standard_normal(scale_shape), dtype)], opset=23)


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("trt", [None, "8.6", "10.1"])
@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx, trt):
    fp16 = "fp16" in fx.name
    result = check_fixture(fx, PASS, *TOL[np.float16 if fp16 else np.float32], seed=4) if trt is None else \
        check_rewrite(fx.build(), PASS, None, *TOL[np.float16 if fp16 else np.float32], trt=trt)
    assert "RMSNormalization" not in _ops(result.model)
    # opset 23: ReduceMean's axes are an input, which parsers before 10.0 ignore: ReduceSum / count there
    assert ("ReduceMean" in _ops(result.model)) == (trt == "10.1")
    for v in ("8.6", "10.1", "10.7") if trt is None else (trt,):
        assert not [f for f in check_model(result.model, v).findings if f.severity == "blocking"], v


def test_check_flags_the_original_with_the_pass():
    findings = check_model(FIXTURES[0].build(), "10.7").findings
    assert [f.fix_pass for f in findings if f.rule == "no-importer"] == [PASS]


@pytest.mark.parametrize("trt", [None, "8.6"])
@pytest.mark.parametrize("case", node_cases("RMSNormalization"), ids=lambda c: c.name)
def test_onnx_node_cases(case, trt):
    check_node_case(case, PASS, 23, 1e-6, 1e-5, trt=trt)


@pytest.mark.parametrize("trt,rewritten", [("7.0", 1), ("8.6", 1), ("10.1", 1), ("10.7", 1), ("10.14", 1), ("10.15", 0),
                                           ("11.1", 0)])
def test_version_boundaries(trt, rewritten):
    assert passes.get(PASS).apply(_rms([2, 3], -1), trt=trt).rewritten == rewritten


def test_stash_type_other_than_float32_and_bfloat16_are_findings():
    stash = passes.get(PASS).apply(_rms([2, 3], -1, stash_type=0))
    assert stash.rewritten == 0 and "stash_type" in stash.findings[0].message
    bf16 = model([node("RMSNormalization", ["x", "s"], ["y"])], [inp("x", 16, [2, 3]), inp("s", 16, [3])],
                 [out("y", 16, [2, 3])], opset=23)
    result = passes.get(PASS).apply(bf16)
    assert result.rewritten == 0 and result.findings


def _check_random(shape, axis_from_end, dtype, eps, dynamic, trt, seed):
    rank = len(shape)
    axis = -axis_from_end if seed % 2 else rank - axis_from_end
    dims = [f"d{i}" if dynamic else d for i, d in enumerate(shape)]
    m = _rms(dims, axis, dtype, scale_shape=list(shape[rank - axis_from_end:]), epsilon=eps)
    x = (np.random.default_rng(seed).standard_normal(shape) * 3 + (seed % 5)).astype(dtype)
    result = check_rewrite(m, PASS, {"x": x}, *TOL[dtype], trt=trt)
    assert "RMSNormalization" not in _ops(result.model)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data(),
       dtype=st.sampled_from([np.float32, np.float16]), eps=st.sampled_from([1e-5, 1e-6, 0.1]), dynamic=st.booleans(),
       trt=st.sampled_from([None, "8.6", "10.1"]), seed=st.integers(0, 2**16))
def test_random_rmsnorm_equals_onnxruntime(shape, data, dtype, eps, dynamic, trt, seed):
    axis_from_end = data.draw(st.integers(1, len(shape)))
    _check_random(shape, axis_from_end, dtype, eps, dynamic, trt, seed)
