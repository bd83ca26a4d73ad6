"""tensorscatter-decompose: fixtures, ONNX TensorScatter node cases, random caches/modes/indices vs onnxruntime, version gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, INT32, INT64, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import check_fixture, check_node_case, check_rewrite, node_cases

PASS = "tensorscatter-decompose"
FIXTURES = [fx for group, fx in all_fixtures() if group == "tensorscatter_decompose"]
ELEM = {np.float32: FLOAT, np.int32: INT32, np.int64: INT64, np.bool_: BOOL}


def _scatter(past, update, writes: bool, dtype=np.float32, **attrs):
    e = ELEM[dtype]
    ins = [inp("past", e, past), inp("update", e, update)] + ([inp("w", INT64, [past[0]])] if writes else [])
    return model([node("TensorScatter", [i.name for i in ins], ["present"], **attrs)], ins, [out("present", e, past)], opset=24)


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, PASS, 0, 0, seed=4)
    assert "TensorScatter" not in _ops(result.model)
    for v in ("8.6", "10.1", "10.7", "10.16"):
        assert not [f for f in check_model(result.model, v).findings if f.severity == "blocking"], v


def test_check_flags_the_original_and_the_3d_cache_on_newer_releases():
    by_name = {fx.name: fx for fx in FIXTURES}
    assert [f.fix_pass for f in check_model(by_name["kv_cache_decode"].build(), "10.7").findings
            if f.severity == "blocking"] == [PASS]
    assert not [f for f in check_model(by_name["kv_cache_decode"].build(), "10.15").findings if f.severity == "blocking"]
    limited = [f for f in check_model(by_name["ring_cache_3d"].build(), "10.16").findings if f.severity == "blocking"]
    assert [(f.fix_pass, f.rule) for f in limited] == [(PASS, "outside-limits")]


@pytest.mark.parametrize("case", node_cases("TensorScatter"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    check_node_case(case, PASS, 24, 0, 0)


@pytest.mark.parametrize("trt,dims,axis,rewritten", [
    ("8.6", [2, 2, 8, 4], -2, 1), ("10.14", [2, 2, 8, 4], -2, 1), ("10.15", [2, 2, 8, 4], -2, 0), ("11.1", [2, 2, 8, 4], 2, 0),
    ("10.15", [2, 8, 4], -2, 1), ("11.1", [2, 8, 2, 4], 1, 1),
])
def test_version_boundaries(trt, dims, axis, rewritten):
    update = list(dims)
    update[axis] = 1
    assert passes.get(PASS).apply(_scatter(dims, update, True, axis=axis), trt=trt).rewritten == rewritten


def test_prefill_is_a_concat_without_gather():
    result = check_rewrite(_scatter([2, 2, 8, 4], [2, 2, 3, 4], False), PASS)
    assert "Gather" not in _ops(result.model) and "Concat" in _ops(result.model)


@settings(max_examples=50, deadline=None)
@given(dims=st.lists(st.integers(1, 4), min_size=2, max_size=5), data=st.data(), circular=st.booleans(),
       writes=st.booleans(), dtype=st.sampled_from([np.float32, np.int32, np.int64, np.bool_]), dynamic=st.booleans(),
       seed=st.integers(0, 2**16))
def test_random_tensorscatter_equals_onnxruntime(dims, data, circular, writes, dtype, dynamic, seed):
    axis = data.draw(st.integers(1, len(dims) - 1))
    dims[axis] = data.draw(st.integers(1, 9))
    seq = data.draw(st.integers(1, dims[axis]))
    update = list(dims)
    update[axis] = seq
    r = np.random.default_rng(seed)
    sym = [f"d{i}" if dynamic else d for i, d in enumerate(dims)]
    usym = [(f"u{i}" if dynamic else seq) if i == axis else s for i, s in enumerate(sym)]
    m = _scatter(sym, usym, writes, dtype, axis=axis - len(dims) if seed % 2 else axis,
                 mode="circular" if circular else "linear")
    feeds = {"past": r.integers(0, 100, dims).astype(dtype), "update": r.integers(100, 200, update).astype(dtype)}
    if writes:
        high = 3 * dims[axis] if circular else dims[axis] - seq
        feeds["w"] = r.integers(0, high + 1, dims[0]).astype(np.int64)
    result = check_rewrite(m, PASS, feeds, 0, 0)
    assert "TensorScatter" not in _ops(result.model)
