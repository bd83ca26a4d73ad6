"""causalconv-decompose: fixtures, ONNX CausalConvWithState node cases, random shapes/states/activations vs onnxruntime."""

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

PASS = "causalconv-decompose"
FIXTURES = [fx for group, fx in all_fixtures() if group == "causalconv_decompose"]
ELEM = {np.float32: FLOAT, np.float16: FLOAT16}
TOL = {np.float32: (1e-5, 1e-5), np.float16: (2e-3, 2e-3)}


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, PASS, *TOL[np.float16 if "fp16" in fx.name else np.float32], seed=4)
    assert "CausalConvWithState" not in _ops(result.model)
    for v in ("8.6", "10.1", "10.7"):
        assert not [f for f in check_model(result.model, v).findings if f.severity == "blocking"], v


def test_check_flags_the_original_with_the_pass_for_every_release():
    for v in ("8.6", "10.7", "11.1"):
        found = [f for f in check_model(FIXTURES[0].build(), v).findings if f.rule == "no-importer"]
        assert [f.fix_pass for f in found] == [PASS]


@pytest.mark.parametrize("case", node_cases("CausalConvWithState"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    fp16 = "fp16" in case.name
    check_node_case(case, PASS, 27, *(TOL[np.float16] if fp16 else (1e-6, 1e-5)), freeze=("weight",))


def test_runtime_weight_of_unknown_shape_is_a_finding():
    m = model([node("CausalConvWithState", ["x", "w"], ["y", "s"])], [inp("x", FLOAT, [1, 2, 5]), inp("w", FLOAT, ["c", 1, "k"])],
              [out("y", FLOAT, [1, 2, 5])], opset=27)
    result = passes.get(PASS).apply(m)
    assert result.rewritten == 0 and "static" in result.findings[0].message


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3), channels=st.integers(1, 6), length=st.integers(1, 7), k=st.integers(1, 5),
       with_bias=st.booleans(), with_state=st.booleans(), activation=st.sampled_from(["none", "silu", "swish"]),
       dtype=st.sampled_from([np.float32, np.float16]), dynamic=st.booleans(), seed=st.integers(0, 2**16))
def test_random_causal_conv_equals_onnxruntime(batch, channels, length, k, with_bias, with_state, activation, dtype, dynamic,
                                               seed):
    r = np.random.default_rng(seed)
    e = ELEM[dtype]
    bsym, lsym = ("b", "l") if dynamic else (batch, length)
    names = ["x", "weight", "bias" if with_bias else "", "state" if with_state else ""]
    inits = [init("weight", r.standard_normal((channels, 1, k)), dtype)]
    if with_bias:
        inits.append(init("bias", r.standard_normal(channels), dtype))
    ins = [inp("x", e, [bsym, channels, lsym])] + ([inp("state", e, [bsym, channels, k - 1])] if with_state else [])
    m = model([node("CausalConvWithState", [n for n in names if n] if not with_state else names, ["y", "present"],
                    activation=activation)], ins, [out("y", e, [bsym, channels, lsym]), out("present", e, [bsym, channels, k - 1])],
              inits, opset=27)
    feeds = {"x": r.standard_normal((batch, channels, length)).astype(dtype)}
    if with_state:
        feeds["state"] = r.standard_normal((batch, channels, k - 1)).astype(dtype)
    result = check_rewrite(m, PASS, feeds, *TOL[dtype])
    assert "CausalConvWithState" not in _ops(result.model)
