"""topk-constant-k: torchvision-like fixtures at several anchor counts, ONNX TopK node cases with a
runtime K, version boundaries, random shapes/axes/K bounds/largest with ties and infinities."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphfix
from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT64, const, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    node_cases,
    ort_run,
    remaining_matches,
    runnable,
)

NAME = "topk-constant-k"
FIXTURES = [fx for group, fx in all_fixtures() if group == "topk_constant_k"]
INSIDE, OUTSIDE = ["6.0", "7.2", "8.0", "8.2", "8.4", "8.5", "8.5.3"], ["8.6", "9.0", "10.1"]


def _topk_k(m) -> list:
    return [n.input[1] for n in m.graph.node if n.op_type == "TopK"]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, NAME)
    inits = {i.name for i in result.model.graph.initializer} | {o for n in result.model.graph.node if n.op_type == "Constant" for o in n.output}
    assert all(k in inits for k in _topk_k(result.model))


@pytest.mark.parametrize("anchors", [1, 7, 999, 1000, 1300])
@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_at_anchor_counts_around_the_bound(fx, anchors):
    m = fx.build()
    name = m.graph.input[0].name
    x = np.random.default_rng(anchors).standard_normal((2, anchors)).astype(np.float32)
    x[:, ::3] = 0.5  # ties
    x[0, -1] = -np.inf
    check_rewrite(m, NAME, {name: x})


@pytest.mark.parametrize("version,rewrites", [(v, True) for v in INSIDE] + [(v, False) for v in OUTSIDE])
def test_version_boundaries(version, rewrites):
    result = passes.get(NAME).apply(FIXTURES[0].build(), trt=version)
    assert (result.rewritten > 0) == rewrites


@pytest.mark.parametrize("version", ["8.2", "8.5", "8.6", "10.1"])
@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_auto_leaves_no_blocking_finding(fx, version):
    result = graphfix.fix(fx.build(), "auto", trt=version, input_shapes=fx.input_shapes, seed=3)
    assert [f.message for f in check_model(result.model, version).findings if f.severity == "blocking"] == []
    assert all(r.verdict in ("kept", "unchanged") for r in result.report.passes)


def test_constant_k_is_left_to_fold_weights():
    m = model([const("k", [3], np.int64), node("TopK", ["x", "k"], ["v", "i"], name="/TopK")],
              [inp("x", FLOAT, [2, 9])], [out("v", FLOAT, [2, 3]), out("i", INT64, [2, 3])], opset=13)
    assert remaining_matches(m, NAME) == []


def test_unbounded_k_and_sorted_0_are_findings():
    m = model([node("TopK", ["x", "k"], ["v", "i"], name="/TopK")],
              [inp("x", FLOAT, [2, "n"]), inp("k", INT64, [1])], [out("v", FLOAT, [2, None]), out("i", INT64, [2, None])],
              opset=13)
    result = passes.get(NAME).apply(m)
    assert result.rewritten == 0 and "no constant bound" in result.findings[0].message
    unsorted = FIXTURES[0].build()
    next(n for n in unsorted.graph.node if n.op_type == "TopK").attribute.append(onnx.helper.make_attribute("sorted", 0))
    result = passes.get(NAME).apply(unsorted)
    assert result.rewritten == 0 and "sorted=0" in result.findings[0].message


@pytest.mark.parametrize("case", node_cases("TopK"), ids=lambda c: c.name)
def test_onnx_node_cases_with_runtime_k(case):
    """K is a graph input in the node cases; static axes bound it by their length."""
    m = runnable(case.model, 11)
    if m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT64:
        pytest.skip("onnxruntime has no uint64 TopK")
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        result = check_rewrite(m, NAME, feeds)
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ random cases
@st.composite
def topk_cases(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(0, 6), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    cap = draw(st.integers(1, 8))
    dynamic = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
    dtype = draw(st.sampled_from([np.float32, np.int64]))
    return shape, axis, cap, dynamic, draw(st.integers(0, 1)), dtype, draw(st.integers(0, 2**31))


def _check_random(shape, axis, cap, dynamic, largest, dtype, seed):
    rank = len(shape)
    dims = [f"d{i}" if dyn else d for i, (d, dyn) in enumerate(zip(shape, dynamic, strict=True))]
    elem = FLOAT if dtype == np.float32 else INT64
    m = model([node("Shape", ["x"], ["shape"], name="/Shape"),
               node("Gather", ["shape", "ax"], ["n"], name="/Gather", axis=0),
               node("Min", ["cap", "n"], ["k"], name="/Min"),
               node("TopK", ["x", "k"], ["v", "i"], name="/TopK", axis=axis, largest=largest)],
              [inp("x", elem, dims)], [out("v", elem, [None] * rank), out("i", INT64, [None] * rank)],
              [init("ax", np.array([axis % rank], np.int64)), init("cap", np.array([cap], np.int64))], opset=13)
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 3, shape, endpoint=True).astype(dtype)  # ties
    if dtype == np.float32 and x.size:
        x.flat[rng.integers(0, x.size)] = -np.inf if largest else np.inf
    matched = bool(remaining_matches(m, NAME))  # a static axis makes K fold: fold-weights' case
    assert matched or not dynamic[axis]
    result = check_rewrite(m, NAME, {"x": x}, expect_rewrite=matched)
    assert passes.get(NAME).apply(m, trt="8.6").rewritten == 0
    if matched:
        consts = {i.name for i in result.model.graph.initializer} | {
            o for c in result.model.graph.node if c.op_type == "Constant" for o in c.output}
        assert all(k in consts for k in _topk_k(result.model))


@settings(max_examples=40, deadline=None)
@given(topk_cases())
def test_random_runtime_k_equal_onnxruntime(case):
    _check_random(*case)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(topk_cases())
def test_random_runtime_k_equal_onnxruntime_slow(case):
    _check_random(*case)


@pytest.mark.parametrize("version", ["8.2", "8.5"])
def test_integer_scores_with_runtime_k_end_without_a_blocker(version):
    """Integer padding uses the proven bound of the data (ties keep real elements first), so
    int-argmax-topk can still prove the padded TopK exact in FLOAT."""
    m = model([node("Cast", ["x"], ["xi"], name="/Cast", to=INT64), node("Shape", ["x"], ["shape"], name="/Shape"),
               node("Gather", ["shape", "ax"], ["n"], name="/Gather", axis=0), node("Min", ["cap", "n"], ["k"], name="/Min"),
               node("TopK", ["xi", "k"], ["v", "i"], name="/TopK", axis=1)],
              [inp("x", onnx.TensorProto.INT8, [2, "n"])], [out("v", INT64, [2, None]), out("i", INT64, [2, None])],
              [init("ax", np.array([1], np.int64)), init("cap", np.array([5], np.int64))], opset=13)
    x = np.array([[-128, -128, 3, 3, -128, 1, 1, 0], [1, 2, 3, 4, 5, 6, -128, -128]], np.int8)
    check_rewrite(m, NAME, {"x": x})
    result = graphfix.fix(m, "auto", trt=version, input_shapes={"x": (2, 8)})
    assert [f.message for f in check_model(result.model, version).findings if f.severity == "blocking"] == []
    assert {r.name for r in result.report.passes if r.verdict == "kept"} == {NAME, "int-argmax-topk"}
    for short in (x[:, :2], x[:, :7]):
        feeds = {"x": np.ascontiguousarray(short)}
        for got, want in zip(ort_run(result.model, feeds), ort_run(m, feeds), strict=True):
            np.testing.assert_array_equal(got, want)
