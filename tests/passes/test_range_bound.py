"""range-bound: fixtures, bound derivation (provable or not), version boundaries, random masks."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT32, INT64, const, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import check_fixture, check_rewrite, node_cases, ort_run

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "range_bound"}
SHAPE_TENSOR = "layer-cannot-compute-shape-tensor"


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


def _shape_tensor_findings(m: onnx.ModelProto, version: str) -> list:
    return [f for f in check_model(m, version).findings if f.error_id == SHAPE_TENSOR]


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    before = fx.build()
    assert _shape_tensor_findings(before, "8.6")
    result = check_fixture(fx, "range-bound")
    assert "NonZero" in _ops(result.model)
    for version in ("8.5", "8.6", "10.1"):
        assert not _shape_tensor_findings(result.model, version), version
        assert not [f for f in check_model(result.model, version).findings if f.severity == "blocking"], version


def test_superglue_count_outputs_every_length():
    m = FIXTURES["superglue_mutual_arange"].build()
    result = passes.get("range-bound").apply(m)
    for valid in (0, 1, 17, 32):
        scores = np.zeros((1, 32, 5), np.float32)
        scores[0, :valid, 0] = 1.0
        feeds = {"scores": scores, "desc": np.random.default_rng(valid).random((1, 32, 4), np.float32)}
        idx, matched = ort_run(result.model, feeds)
        np.testing.assert_array_equal(idx, np.arange(valid))
        np.testing.assert_array_equal(matched, feeds["desc"][:, :valid])


def test_static_bound_is_a_named_constant_and_dynamic_bound_a_shape_range():
    static = passes.get("range-bound").apply(FIXTURES["superglue_mutual_arange"].build()).model
    assert "Range" not in _ops(static)
    assert any("upper_32" in t.name for t in static.graph.initializer)
    dynamic = passes.get("range-bound").apply(FIXTURES["dynamic_mask_count_arange"].build()).model
    ranges = [n for n in dynamic.graph.node if n.op_type == "Range"]
    assert len(ranges) == 1 and "upper_dim1" in ranges[0].name
    capped = passes.get("range-bound").apply(FIXTURES["dynamic_count_arange"].build()).model
    assert "Range" not in _ops(capped) and any("upper_6" in t.name for t in capped.graph.initializer)


def test_argmax_bound_with_start_and_step():
    m = passes.get("range-bound").apply(FIXTURES["argmax_length_arange"].build()).model
    for winner in range(16):
        logits = np.zeros((1, 16), np.float32)
        logits[0, winner] = 1
        table = np.arange(16 * 8, dtype=np.float32).reshape(16, 8) / 10
        np.testing.assert_array_equal(ort_run(m, {"logits": logits})[0], table[np.arange(2, winner + 1, 3)])


@pytest.mark.parametrize("version,rewrites", [("8.0", False), ("8.4.3", False), ("8.5", True), ("8.6", True), ("10.1", True), ("11.1", True)])
def test_version_boundaries(version, rewrites):
    result = passes.get("range-bound").apply(FIXTURES["superglue_mutual_arange"].build(), trt=version)
    assert (result.rewritten > 0) == rewrites
    assert ("Range" in _ops(result.model)) != rewrites


def _limit_model(limit_nodes: list, x_shape: list, dtype: int = INT64) -> onnx.ModelProto:
    return model(
        [*limit_nodes, const("zero", 0, np.int64), const("one", 1, np.int64),
         node("Range", ["zero", "n", "one"], ["r"], name="/Range")],
        [inp("x", FLOAT, x_shape)], [out("r", dtype, ["K"])], opset=13,
    )


UNBOUNDED = {
    "max_of_values": [node("ReduceMax", ["x"], ["mx"], keepdims=0), node("Cast", ["mx"], ["n"], to=TensorProto.INT64)],
    "negated_count": [node("Greater", ["x", "z"], ["m"]), node("Cast", ["m"], ["mi"], to=TensorProto.INT64),
                      node("ReduceSum", ["mi"], ["s"], keepdims=0), node("Neg", ["s"], ["n"]),
                      ],
}


@pytest.mark.parametrize("name", ["max_of_values", "negated_count"])
def test_no_provable_bound_is_not_matched_and_check_keeps_the_path(name):
    nodes = [const("z", 0.0, np.float32), *UNBOUNDED[name]] if name == "negated_count" else UNBOUNDED[name]
    m = _limit_model(nodes, [2, 3] if name != "max_of_values" else [5])
    result = passes.get("range-bound").apply(m)
    assert result.matched == 0 and result.model is m
    found = _shape_tensor_findings(m, "8.6")
    assert found and found[0].path and found[0].fix_pass is None


def test_narrowing_cast_needs_a_non_negative_value():
    index = [node("ArgMax", ["x"], ["a"], axis=0, keepdims=0), node("Cast", ["a"], ["a32"], to=TensorProto.INT32),
             node("Cast", ["a32"], ["n"], to=TensorProto.INT64)]
    x = np.array([0, 1, -5, 2, 9, -3, 1], np.float32)
    result = check_rewrite(_limit_model(index, [7]), "range-bound", {"x": x})  # an index narrows safely
    np.testing.assert_array_equal(ort_run(result.model, {"x": x})[0], np.arange(4))
    signed = [const("z", 0.0, np.float32), node("Greater", ["x", "z"], ["m"]), node("Cast", ["m"], ["m64"], to=TensorProto.INT64),
              node("ReduceSum", ["m64"], ["s"], keepdims=0), const("k", 2, np.int64), node("Sub", ["s", "k"], ["d"]),
              node("Cast", ["d"], ["d32"], to=TensorProto.INT32), node("Cast", ["d32"], ["n"], to=TensorProto.INT64)]
    assert passes.get("range-bound").apply(_limit_model(signed, [7])).matched == 0  # count - 2 may be negative


@pytest.mark.parametrize("case", node_cases("Range"), ids=lambda c: c.name)
def test_onnx_node_cases_are_left_to_range_inputs(case):
    """The node cases feed start/limit/delta as graph inputs (nothing data-derived to bound), and are
    float or have a negative delta: range-bound leaves every one alone."""
    assert passes.get("range-bound").apply(case.model).matched == 0


# ------------------------------------------------------------------ random masks
@st.composite
def mask_cases(draw):
    rows, m = draw(st.integers(1, 3)), draw(st.integers(0, 40))
    return (rows, m, draw(st.booleans()), draw(st.floats(0, 1)), draw(st.integers(-3, 3)), draw(st.integers(1, 3)),
            draw(st.sampled_from([INT32, INT64])), draw(st.sampled_from(["row", "all", "argmax"])), draw(st.integers(0, 2**31)))


def _check_random(rows, m, dynamic, density, start, step, elem, reduce, seed):
    np_dtype = np.int32 if elem == INT32 else np.int64
    nodes = [const("thr", 1.0 - density, np.float32), node("Less", ["thr", "x"], ["mask"])]
    if reduce == "argmax":
        nodes += [node("ArgMax", ["x"], ["a"], axis=1, keepdims=0), node("ReduceMax", ["a"], ["n64"], keepdims=0),
                  node("Cast", ["n64"], ["n"], to=elem)]
    else:
        nodes += [node("Cast", ["mask"], ["mi"], to=elem),
                  node("ReduceSum", ["mi", "axes"], ["s"], keepdims=0) if reduce == "row" else node("ReduceSum", ["mi"], ["s"], keepdims=0)]
        nodes += [node("Gather", ["s", "first"], ["n"], axis=0)] if reduce == "row" else [node("Identity", ["s"], ["n"])]
    nodes += [node("Range", ["start", "n", "step"], ["r"], name="/Range")]
    inits = [init("axes", [1], np.int64), init("first", 0, np.int64), init("start", start, np_dtype), init("step", step, np_dtype)]
    g = model(nodes, [inp("x", FLOAT, [rows, "M" if dynamic else m])], [out("r", elem, ["K"])], inits, opset=13)
    x = np.random.default_rng(seed).random((rows, m), np.float32)
    if m == 0 and reduce == "argmax":
        return  # ArgMax over an empty axis is undefined
    result = check_rewrite(g, "range-bound", {"x": x})
    assert "NonZero" in _ops(result.model)


@settings(max_examples=40, deadline=None)
@given(mask_cases())
def test_random_masks_equal_onnxruntime(case):
    _check_random(*case)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(mask_cases())
def test_random_masks_equal_onnxruntime_slow(case):
    _check_random(*case)
