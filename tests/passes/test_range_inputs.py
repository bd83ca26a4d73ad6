"""range-inputs: folding, float->integer Range, data-dependent findings, ONNX Range node cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT64, const, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import (
    case_feeds,
    check_rewrite,
    freeze_inputs,
    node_cases,
    ort_run,
    remaining_matches,
    runnable,
)

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "range_inputs"}


def test_static_shape_range_folds_to_initializer():
    result = check_rewrite(FIXTURES["arange_static_shape"].build(), "range-inputs")
    assert "Range" not in [n.op_type for n in result.model.graph.node]


def test_float_multiple_of_shape_becomes_integer_range():
    m = FIXTURES["arange_half_dynamic"].build()
    for t in (1, 2, 7, 8, 9):
        x = np.random.default_rng(t).standard_normal((2, t)).astype(np.float32)
        result = check_rewrite(m, "range-inputs", {"x": x})
    producers = {o: n for n in result.model.graph.node for o in n.output}
    ranges = [n for n in result.model.graph.node if n.op_type == "Range"]
    assert len(ranges) == 1
    limit = producers[ranges[0].input[1]]
    assert limit.op_type == "Div"  # (n + 1) / 2 in integers
    assert all(producers[i].op_type != "Cast" for i in ranges[0].input if i in producers)


def _shape_tensor_finding(m) -> str:
    report = check_model(m, "8.4")  # from 8.5 range-bound rewrites bounded ones; 8.4 keeps the finding
    return next(f for f in report.findings if f.error_id == "layer-cannot-compute-shape-tensor").message


def test_argmax_limit_is_left_to_check_which_names_the_path():
    m = FIXTURES["arange_over_argmax"].build()
    result = passes.get("range-inputs").apply(m)
    assert result.rewritten == 0 and result.model is m
    message = _shape_tensor_finding(m)
    assert "ArgMax '/ArgMax' -> Add '/Add'" in message and "TopK" in message


def test_reduce_max_of_data_is_a_finding():
    m = model(
        [node("ReduceMax", ["x"], ["mx"], keepdims=0, name="/ReduceMax"), node("Cast", ["mx"], ["n"], to=INT64),
         const("zero", 0, np.int64), const("one", 1, np.int64), node("Range", ["zero", "n", "one"], ["r"], name="/Range")],
        [inp("x", FLOAT, [5])], [out("r", INT64, ["K"])],
    )
    assert "ReduceMax '/ReduceMax' -> Cast" in _shape_tensor_finding(m)


def test_shape_derived_integer_range_is_left_alone():
    m = model(
        [node("Shape", ["x"], ["s"]), const("i", 1, np.int64), node("Gather", ["s", "i"], ["n"], axis=0),
         const("zero", 0, np.int64), const("one", 1, np.int64), node("Range", ["zero", "n", "one"], ["r"])],
        [inp("x", FLOAT, [2, "T"])], [out("r", INT64, ["T"])],
    )
    assert remaining_matches(m, "range-inputs") == []


@pytest.mark.parametrize("case", node_cases("Range"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    """The case's inputs become computed constants (initializer -> Identity), as exports have them."""
    if any(x in case.name for x in ("float16", "bfloat16")):
        pytest.skip("16-bit float Range exists only in an opset newer than onnxruntime 1.31 implements: no reference run")
    for inputs, expected in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        m = freeze_inputs(runnable(case.model, 11), feeds)
        for t in m.graph.initializer:
            t.name = f"{t.name}_value"
        m.graph.node.extend(node("Identity", [f"{k}_value"], [k]) for k in feeds)
        m.graph.node.append(m.graph.node.pop(0))  # Range last: topological order
        floating = "float" in case.name or "double" in case.name
        result = check_rewrite(m, "range-inputs", {}, expect_rewrite=floating)
        # float Range over computed inputs is folded away; integer Range is accepted by every release, left alone
        assert ("Range" in [n.op_type for n in result.model.graph.node]) == (not floating)
        for got, want in zip(ort_run(result.model, {}), expected, strict=True):
            np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 40), start=st.integers(0, 3), scale=st.sampled_from([0.5, 0.25, 2.0, 3.0, 1.0]), div=st.booleans())
def test_random_float_limits(n, start, scale, div):
    if div and scale == 3.0:
        scale = 4.0  # 1/3 is not exact in float32, so Div by it is (rightly) not rewritten
    c = 1 / scale if div else scale
    m = model(
        [node("Shape", ["x"], ["s"]), const("i", 0, np.int64), node("Gather", ["s", "i"], ["n"], axis=0),
         node("Cast", ["n"], ["nf"], to=FLOAT), const("c", c, np.float32), node("Div" if div else "Mul", ["nf", "c"], ["limit"]),
         const("st", float(start), np.float32), const("one", 1.0, np.float32), node("Range", ["st", "limit", "one"], ["r"])],
        [inp("x", FLOAT, ["N"])], [out("r", FLOAT, ["K"])],
    )
    result = check_rewrite(m, "range-inputs", {"x": np.zeros(n, np.float32)})
    assert "Cast" in [x.op_type for x in result.model.graph.node][-1:]


def _runtime_range(start: float, step: float, factor: float | None, dtype=np.float32):
    """Range(start, Cast(x.shape[0]) [* factor], step) in ``dtype``: the legacy export of
    torch.arange(start, n * factor, step) with n from a dynamic dim."""
    nodes = [node("Shape", ["x"], ["s"]), const("i", 0, np.int64), node("Gather", ["s", "i"], ["n"], axis=0),
             node("Cast", ["n"], ["nf"], to=FLOAT)]
    limit = "nf"
    if factor is not None:
        nodes += [const("c", factor, dtype), node("Mul", ["nf", "c"], ["limit"])]
        limit = "limit"
    nodes += [const("st", start, dtype), const("step", step, dtype), node("Range", ["st", limit, "step"], ["r"], name="/Range")]
    return model(nodes, [inp("x", FLOAT, ["N"])], [out("r", FLOAT, ["K"])])


def test_check_flags_a_float_range_that_has_no_rewrite():
    """8.0-8.2 reject every float Range with runtime inputs: the rule does not ask whether a rewrite exists."""
    m = _runtime_range(0.5, 1.0, None)  # a non-integral start: no exact integer form
    blocking = [f for f in check_model(m, "8.0").findings if f.severity == "blocking" and f.op == "Range"]
    assert len(blocking) == 1 and blocking[0].error_id == "range-input-types"
    assert not [f for f in check_model(m, "8.4").findings if f.op == "Range"]
    result = passes.get("range-inputs").apply(m, trt="8.0")
    assert result.rewritten == 0 and "no exact integer form" in result.findings[0].message


def test_half_step_arange_is_flagged_and_rewritten_exactly():
    m = _runtime_range(0.0, 0.5, None)
    assert any(f.op == "Range" and f.severity == "blocking" for f in check_model(m, "8.0").findings)
    for n in (0, 1, 2, 7, 16):
        result = check_rewrite(m, "range-inputs", {"x": np.zeros(n, np.float32)}, atol=0, rtol=0, trt="8.0")
        np.testing.assert_array_equal(ort_run(result.model, {"x": np.zeros(n, np.float32)})[0],
                                      np.arange(0, n, 0.5, dtype=np.float32))
    assert not [f for f in check_model(result.model, "8.0").findings if f.op == "Range"]


#: Steps as ratios: dyadic (exact in float32) and rounded ones (1/3, 2/7, 1/10: float32 rounds them up).
STEPS = [0.5, 0.25, 1.5, 0.75, 2.0, -0.5, -1.5, 1 / 3, 2 / 7, 1 / 10, -1 / 3, 5 / 6]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), start=st.integers(-3, 5), step=st.sampled_from(STEPS),
       factor=st.sampled_from([None, 0.5, 2.0, 0.25]))
def test_rational_steps_keep_the_count_and_values(n, start, step, factor):
    if float(np.float32(step)) != step and abs(float(np.float32(step))) < abs(step):
        return  # rounds toward zero: not rewritten (tested below)
    m = _runtime_range(float(start), float(np.float32(step)), factor)
    feeds = {"x": np.zeros(n, np.float32)}
    # exact in binary: bit for bit. Otherwise onnxruntime accumulates (value += delta) where the ONNX
    # spec and TensorRT's fill compute start + i * delta, as the rewrite does: a rounding difference
    exact = float(np.float32(step)) == step
    result = check_rewrite(m, "range-inputs", feeds, atol=0 if exact else 1e-4, rtol=0 if exact else 1e-5, trt="8.0")
    assert "Range" in [x.op_type for x in result.model.graph.node]
    got = ort_run(result.model, feeds)[0]
    limit = n * (factor or 1.0)
    want_count = max(int(np.ceil((limit - start) / np.float64(np.float32(step)))), 0)
    assert got.shape == (want_count,)


def test_a_step_rounded_toward_zero_is_left_with_a_finding():
    """float32(5/6) < 5/6: at multiples of 5/6 the float count is one more than the ratio's, so no
    integer count is exact without float32's own 2^-24 denominators."""
    down = float(np.float32(5 / 6))
    assert down < 5 / 6
    result = passes.get("range-inputs").apply(_runtime_range(0.0, down, None), trt="8.0")
    assert result.rewritten == 0 and "no exact integer form" in result.findings[0].message
    up = float(np.float32(1 / 3))
    assert up > 1 / 3 and passes.get("range-inputs").apply(_runtime_range(0.0, up, None), trt="8.0").rewritten == 1


@pytest.mark.parametrize("case", [c for c in node_cases("Range") if "float" in c.name and "16" not in c.name],
                         ids=lambda c: c.name)
def test_onnx_float_node_cases_with_a_runtime_limit(case):
    """The case's float Range with its limit computed at runtime (Cast of an INT64 input), as exports have it."""
    for inputs, expected in case.data_sets:
        start, limit, delta = (np.asarray(v) for v in inputs)
        m = model([const("st", start, np.float32), const("d", delta, np.float32), node("Cast", ["n"], ["lim"], to=FLOAT),
                   node("Range", ["st", "lim", "d"], ["r"], name="/Range")],
                  [inp("n", INT64, [])], [out("r", FLOAT, ["K"])])
        feeds = {"n": np.asarray(limit, np.int64)}
        assert float(limit).is_integer()
        result = check_rewrite(m, "range-inputs", feeds, atol=0, rtol=0, trt="8.0")
        np.testing.assert_array_equal(ort_run(result.model, feeds)[0], expected[0])
