"""reduce-axes-input: fixtures, ONNX Reduce node cases at opset 18, version boundaries, random axes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.graph.build import PRODUCT_TERMS
from graphfix.passes.reduce_axes_input import OPS
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run

FIXTURES = [fx for group, fx in all_fixtures() if group == "reduce_axes_input"]
INSIDE, OUTSIDE = ["8.0", "8.2", "8.5", "8.6", "9.3"], ["10.0", "10.1", "11.1"]
DECOMPOSED = sorted(OPS)


def _reduces(m: onnx.ModelProto) -> list[str]:
    """Reduce nodes old importers would read wrongly: opset-18 form with an axes input."""
    return [n.op_type for n in m.graph.node if n.op_type in OPS and len(n.input) > 1 and n.input[1]]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "reduce-axes-input", atol=1e-5, rtol=1e-5)
    assert not _reduces(result.model)
    for version in INSIDE:
        assert not [f for f in check_model(result.model, version).findings if f.rule == "wrong-results"], version


def test_mean_over_static_dims_divides_by_a_constant():
    fx = next(f for f in FIXTURES if f.name == "dynamo_layernorm_by_hand")
    ops = [n.op_type for n in passes.get("reduce-axes-input").apply(fx.build()).model.graph.node]
    assert "Shape" not in ops and ops.count("ReduceSum") == 2


@pytest.mark.parametrize("version,rewrites", [(v, True) for v in INSIDE] + [(v, False) for v in OUTSIDE])
def test_version_boundaries(version, rewrites):
    result = passes.get("reduce-axes-input").apply(FIXTURES[0].build(), trt=version)
    assert (result.rewritten > 0) == rewrites


def test_check_flags_the_wrong_results_before_10():
    fx = next(f for f in FIXTURES if f.name == "mean_pool_dynamic")
    findings = check_model(fx.build(), "8.6").findings
    assert [f.rule for f in findings if f.op == "ReduceMean"] == ["wrong-results"]
    assert not [f for f in check_model(fx.build(), "10.1").findings if f.op == "ReduceMean"]


def _reduce_model(op: str, shape, axes, keepdims: int, opset: int = 18) -> onnx.ModelProto:
    rank = len(shape)
    reduced = {a % rank for a in axes} or set(range(rank))  # no axes: every axis
    kept = [1 if i in reduced else d for i, d in enumerate(shape)]
    out_shape = kept if keepdims else [d for i, d in enumerate(shape) if i not in reduced]
    return model([node(op, ["x", "axes"], ["y"], keepdims=keepdims)], [inp("x", FLOAT, list(shape))], [out("y", FLOAT, out_shape)],
                 [init("axes", np.asarray(axes, np.int64))], opset=opset)


def test_empty_axes_and_older_opsets_are_left_alone():
    p = passes.get("reduce-axes-input")
    assert p.apply(_reduce_model("ReduceMean", [2, 3], [], 1)).matched == 0  # every axis: old importers agree
    attr_form = model([node("ReduceMean", ["x"], ["y"], axes=[1])], [inp("x", FLOAT, [2, 3])], [out("y", FLOAT, [2, 1])], opset=17)
    assert p.apply(attr_form).matched == 0


def test_reduce_prod_over_dynamic_dims_is_a_finding():
    m = model([node("ReduceProd", ["x", "axes"], ["y"], keepdims=1)], [inp("x", FLOAT, [2, "L"])], [out("y", FLOAT, [2, 1])],
              [init("axes", np.asarray([1], np.int64))], opset=18)
    result = passes.get("reduce-axes-input").apply(m)
    assert result.rewritten == 0 and "ReduceProd" in result.findings[0].message


def test_reduce_prod_over_static_dims_is_a_product_of_slices():
    x = np.random.default_rng(3).uniform(-2, 2, (2, 3, 4)).astype(np.float32)
    result = check_rewrite(_reduce_model("ReduceProd", [2, 3, 4], [-1, 1], 0), "reduce-axes-input", {"x": x}, atol=1e-5, rtol=1e-5)
    assert not _reduces(result.model) and "Mul" in [n.op_type for n in result.model.graph.node]


@pytest.mark.parametrize("case", [c for op in DECOMPOSED for c in node_cases(op)], ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = case.model
    if m.opset_import[0].version < 18 or len(m.graph.input) < 2:
        pytest.skip("not the opset-18 axes-input form")
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        axes = feeds.pop(m.graph.input[1].name)
        frozen = onnx.ModelProto()
        frozen.CopyFrom(m)
        del frozen.graph.input[1]
        frozen.graph.initializer.append(onnx.numpy_helper.from_array(axes, m.graph.node[0].input[1]))
        if axes.size == 0:
            continue  # every axis: left alone
        if 0 in feeds[m.graph.input[0].name].shape and m.graph.node[0].op_type in ("ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceProd"):
            assert passes.get("reduce-axes-input").apply(frozen).findings  # +-inf constants: left as they are
            continue
        result = check_rewrite(frozen, "reduce-axes-input", feeds, atol=1e-5, rtol=1e-5)
        assert not _reduces(result.model)
        np.testing.assert_allclose(ort_run(result.model, feeds)[0], expected[0], rtol=1e-5, atol=1e-5)


@st.composite
def reduce_cases(draw):
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    axes = draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda a: a % rank))
    return draw(st.sampled_from(DECOMPOSED)), shape, axes, draw(st.integers(0, 1)), draw(st.integers(0, 2**31))


@settings(max_examples=60, deadline=None)
@given(reduce_cases())
def test_random_reductions_equal_onnxruntime(case):
    op, shape, axes, keepdims, seed = case
    x = np.random.default_rng(seed).uniform(0.1 if op == "ReduceLogSum" else -3, 3, shape).astype(np.float32)
    if op == "ReduceProd" and np.prod([shape[a] for a in axes]) > PRODUCT_TERMS:
        assert passes.get("reduce-axes-input").apply(_reduce_model(op, shape, axes, keepdims)).findings
        return
    result = check_rewrite(_reduce_model(op, shape, axes, keepdims), "reduce-axes-input", {"x": x}, atol=1e-5, rtol=1e-5)
    assert not _reduces(result.model)
