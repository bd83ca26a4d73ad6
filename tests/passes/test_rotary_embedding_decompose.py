"""rotary-embedding-decompose: fixtures, ONNX RotaryEmbedding node cases, random layouts/attributes vs onnxruntime, version gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, INT64, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import check_fixture, check_node_case, check_rewrite, node_cases

PASS = "rotary-embedding-decompose"
FIXTURES = [fx for group, fx in all_fixtures() if group == "rotary_embedding_decompose"]
ELEM = {np.float32: FLOAT, np.float16: FLOAT16}
TOL = {np.float32: (1e-6, 1e-5), np.float16: (2e-3, 2e-3)}


def _rope(x_dims, cache_dims, positions, dtype=np.float32, **attrs):
    e = ELEM[dtype]
    ins = [inp("x", e, x_dims), inp("cos", e, cache_dims), inp("sin", e, cache_dims)]
    names = ["x", "cos", "sin"]
    if positions is not None:
        ins.append(inp("pos", INT64, positions))
        names.append("pos")
    return model([node("RotaryEmbedding", names, ["y"], **attrs)], ins, [out("y", e, x_dims)], opset=23)


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, PASS, 1e-6, 1e-5, seed=4)
    assert "RotaryEmbedding" not in _ops(result.model)
    for v in ("8.6", "10.1", "10.7"):
        assert not [f for f in check_model(result.model, v).findings if f.severity == "blocking"], v


def test_check_flags_the_original_with_the_pass():
    findings = check_model(FIXTURES[0].build(), "10.7").findings
    assert [f.fix_pass for f in findings if f.rule == "no-importer"] == [PASS]


@pytest.mark.parametrize("case", node_cases("RotaryEmbedding"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    check_node_case(case, PASS, 23, 1e-6, 1e-5)


@pytest.mark.parametrize("trt,rewritten", [("8.6", 1), ("10.7", 1), ("10.14", 1), ("10.15", 0), ("11.1", 0)])
def test_version_boundaries(trt, rewritten):
    m = _rope([1, 2, 3, 8], [10, 4], [1, 3])
    assert passes.get(PASS).apply(m, trt=trt).rewritten == rewritten


def test_dynamic_head_size_is_a_finding():
    dynamic = passes.get(PASS).apply(_rope([1, 2, 3, "head"], [10, 4], [1, 3]))
    assert dynamic.rewritten == 0 and "head size" in dynamic.findings[0].message


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3), heads=st.integers(1, 3), seq=st.integers(1, 5), half=st.integers(1, 4),
       extra=st.sampled_from([0, 0, 2, 4]), interleaved=st.booleans(), three_d=st.booleans(), with_positions=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float16]), dynamic=st.booleans(), seed=st.integers(0, 2**16))
def test_random_rotary_equals_onnxruntime(batch, heads, seq, half, extra, interleaved, three_d, with_positions, dtype,
                                          dynamic, seed):
    head, r = 2 * half + extra, np.random.default_rng(seed)
    b, s = ("b", "s") if dynamic else (batch, seq)
    x_dims = [b, s, heads * head] if three_d else [b, heads, s, head]
    attrs = {"interleaved": int(interleaved)}
    if extra:
        attrs["rotary_embedding_dim"] = 2 * half
    if three_d:
        attrs["num_heads"] = heads
    max_pos = 7
    cache_dims = [max_pos, half] if with_positions else [b, s, half]
    m = _rope(x_dims, cache_dims, [b, s] if with_positions else None, dtype, **attrs)
    shape = [batch, seq, heads * head] if three_d else [batch, heads, seq, head]
    angles = r.uniform(-3, 3, [max_pos, half] if with_positions else [batch, seq, half])
    feeds = {"x": r.standard_normal(shape).astype(dtype), "cos": np.cos(angles).astype(dtype), "sin": np.sin(angles).astype(dtype)}
    if with_positions:
        feeds["pos"] = r.integers(0, max_pos, (batch, seq)).astype(np.int64)
    result = check_rewrite(m, PASS, feeds, *TOL[dtype])
    assert "RotaryEmbedding" not in _ops(result.model)


@pytest.mark.parametrize("attrs,says", [({"interleaved": 7}, "interleaved 7"), ({"rotary_embedding_dim": -2}, "rotary_embedding_dim -2")],
                         ids=["interleaved_7", "negative_dim"])
def test_out_of_spec_attributes_are_findings_not_rewrites(attrs, says):
    """onnxruntime reads interleaved 7 as 0: the node is left as it is and said why, not rewritten
    for verification to roll back."""
    applied = passes.get(PASS).apply(_rope([1, 2, 3, 8], [10, 4], [1, 3], **attrs))
    assert applied.rewritten == 0 and says in applied.findings[0].message, applied.findings
