"""activation-decompose: fixtures, ONNX Mish/HardSwish/Celu node cases, random inputs vs onnxruntime's ops, version gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

FIXTURES = [fx for group, fx in all_fixtures() if group == "activation_decompose"]
PASS = "activation-decompose"
ELEM = {np.float32: FLOAT, np.float16: FLOAT16}
#: (atol, rtol) against onnxruntime's native op (fp16 Mish/HardSwish run the same function body there).
TOL = {np.float32: (1e-6, 1e-5), np.float16: (1e-3, 2e-3)}
#: op -> opset it is exported at (Mish 18, HardSwish 14, Celu 12)
OPSET = {"Mish": 18, "HardSwish": 14, "Celu": 12}


def _single(op: str, dims: list, elem: int = FLOAT, **attrs):
    return model([node(op, ["x"], ["y"], **attrs)], [inp("x", elem, dims)], [out("y", elem, dims)], opset=OPSET[op])


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, PASS, atol=1e-6, rtol=1e-5, seed=6)
    assert not {"Mish", "HardSwish", "Celu"} & set(_ops(result.model))
    for v in ("7.0", "7.1", "7.2", "8.0", "8.2", "8.4-EA", "8.5", "9.3"):
        assert not [f for f in check_model(result.model, v).findings if f.rule == "no-importer"], v


@pytest.mark.parametrize("op", ["Mish", "HardSwish", "Celu"])
def test_check_flags_the_original(op):
    fx = next(f for f in FIXTURES if op in _ops(f.build()))
    findings = [f for f in check_model(fx.build(), "7.0").findings if f.rule == "no-importer"]
    assert findings and {f.fix_pass for f in findings} == {PASS}


CASES = [c for op in ("Mish", "HardSwish", "Celu") for c in node_cases(op)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_node_cases(case):
    op = case.model.graph.node[0].op_type
    m = runnable(case.model, OPSET[op])
    elem = m.graph.input[0].type.tensor_type.elem_type
    if elem == 16:  # bfloat16: numpy has no such type for the constants; left as is, with the reason
        result = passes.get(PASS).apply(m)
        assert result.rewritten == 0 and "bfloat16" in result.findings[0].message
        return
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        if op == "Celu" and elem == FLOAT16:  # fp16 Celu is opset 28: onnxruntime cannot run the original
            result = passes.get(PASS).apply(m)
            assert result.rewritten == 1
        else:
            result = check_rewrite(m, PASS, feeds, atol=1e-6, rtol=1e-5)
        assert op not in _ops(result.model)
        tol = 1e-3 if elem == FLOAT16 else 1e-5
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("op,trt,rewritten", [
    ("Mish", "6.0", 0), ("Mish", "7.0", 1), ("Mish", "9.3", 1), ("Mish", "10.0-EA", 0), ("Mish", "10.1", 0),
    ("HardSwish", "7.0", 1), ("HardSwish", "8.2", 1), ("HardSwish", "8.4-EA", 1), ("HardSwish", "8.4", 0), ("HardSwish", "8.5", 0),
    ("Celu", "6.0", 0), ("Celu", "7.0", 1), ("Celu", "7.2", 1), ("Celu", "7.2-ngc21.05", 0), ("Celu", "8.0", 0),
])
def test_version_boundaries(op, trt, rewritten):
    assert passes.get(PASS).apply(_single(op, [2, 3]), trt=trt).rewritten == rewritten


def _values(dtype, shape, seed: int, scale: float, specials: bool) -> np.ndarray:
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape) * scale
    if specials and x.size:
        pool = [np.inf, -np.inf, np.nan, 0.0, -0.0, 3.0, -3.0, 6e4 if dtype == np.float16 else 1e30]
        flat = x.reshape(-1)
        picks = r.integers(0, flat.size, max(1, flat.size // 4))
        flat[picks] = r.choice(pool, picks.size)
    return np.asarray(x, dtype)


def _check_random(op, shape, dtype, alpha, scale, specials, dynamic, seed):
    dims = [f"d{i}" if dynamic else d for i, d in enumerate(shape)]
    attrs = {"alpha": alpha} if op == "Celu" else {}
    m = _single(op, dims, ELEM[dtype], **attrs)
    x = _values(dtype, shape, seed, scale, specials)
    result = check_rewrite(m, PASS, {"x": x}, *TOL[dtype])
    assert op not in _ops(result.model)


def _config(op: str) -> dict:
    return dict(
        op=st.just(op),
        shape=st.lists(st.integers(1, 6), min_size=0, max_size=4),
        dtype=st.just(np.float32) if op == "Celu" else st.sampled_from([np.float32, np.float16]),
        alpha=st.sampled_from([1.0, 0.5, 2.0, 0.1]),
        scale=st.sampled_from([0.5, 3.0, 30.0]),
        specials=st.booleans(),
        dynamic=st.booleans(),
        seed=st.integers(0, 2**16),
    )


@pytest.mark.parametrize("op", ["Mish", "HardSwish", "Celu"])
def test_random_inputs_equal_onnxruntime(op):
    settings(max_examples=40, deadline=None)(given(**_config(op))(_check_random))()


@pytest.mark.slow
@pytest.mark.parametrize("op", ["Mish", "HardSwish", "Celu"])
def test_random_inputs_equal_onnxruntime_slow(op):
    settings(max_examples=300, deadline=None)(given(**_config(op))(_check_random))()
