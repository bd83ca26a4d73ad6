"""fold-clip: fixtures, the ONNX Clip node cases, and random bounds (hypothesis)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT32, INT64, const, init, inp, model, node, out
from graphfix.verify.inputs import make_inputs
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    node_cases,
    ort_run,
    remaining_matches,
    runnable,
)

FIXTURES = [fx for group, fx in all_fixtures() if group == "fold_clip"]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "fold-clip", seed=7)
    for n in result.model.graph.node:
        assert not (n.op_type == "Clip" and any(i and i not in {t.name for t in result.model.graph.initializer} for i in n.input[1:]))


def test_constant_bounds_stay_a_clip_with_initializers():
    result = check_rewrite(FIXTURES[0].build(), "fold-clip")
    clips = [n for n in result.model.graph.node if n.op_type == "Clip"]
    assert len(clips) == 1 and clips[0].name == "/Clip"
    inits = {t.name: t for t in result.model.graph.initializer}
    assert all(i in inits for i in clips[0].input[1:])
    assert all(n.op_type != "Cast" for n in result.model.graph.node)


def test_dynamic_bound_becomes_max_min():
    fx = next(f for f in FIXTURES if f.name == "clip_shape_max_dynamic")
    result = check_rewrite(fx.build(), "fold-clip", make_inputs(fx.build(), fx.input_shapes)[0])
    ops = [n.op_type for n in result.model.graph.node]
    assert "Clip" not in ops and "Max" in ops and "Min" in ops


def test_static_shape_bound_is_folded():
    fx = next(f for f in FIXTURES if f.name == "clip_shape_max_static")
    result = check_rewrite(fx.build(), "fold-clip")
    clip = next(n for n in result.model.graph.node if n.op_type == "Clip")
    hi = next(t for t in result.model.graph.initializer if t.name == clip.input[2])
    assert float(np.frombuffer(hi.raw_data, np.float32)[0]) == 31.0


def test_constant_node_bounds_are_left_alone():
    m = model([const("lo", -1.0, np.float32), node("Clip", ["x", "lo"], ["y"])], [inp("x", FLOAT, [3])], [out("y", FLOAT, [3])])
    assert remaining_matches(m, "fold-clip") == []


@pytest.mark.parametrize("case", node_cases("Clip"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 13)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        result = check_rewrite(m, "fold-clip", feeds, expect_rewrite=False)
        assert remaining_matches(result.model, "fold-clip") == []
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from([np.float32, np.int32, np.int64]),
    lo=st.one_of(st.none(), st.integers(-5, 5)),
    hi=st.one_of(st.none(), st.integers(-5, 5)),
    computed=st.booleans(),
    shape=st.lists(st.integers(1, 4), min_size=0, max_size=3),
)
def test_random_bounds(dtype, lo, hi, computed, shape):
    elem = {np.float32: FLOAT, np.int32: INT32, np.int64: INT64}[dtype]
    nodes, inits, names = [], [], []
    for label, v in (("lo", lo), ("hi", hi)):
        if v is None:
            names.append("")
        elif computed:
            nodes += [const(f"{label}_c", float(v), np.float64), node("Cast", [f"{label}_c"], [label], to=elem)]
            names.append(label)
        else:
            inits.append(init(label, v, dtype))
            names.append(label)
    while names and names[-1] == "":
        names.pop()
    nodes.append(node("Clip", ["x", *names], ["y"]))
    m = model(nodes, [inp("x", elem, shape)], [out("y", elem, shape)], inits)
    feeds = {"x": (np.random.default_rng(0).standard_normal(shape) * 6).astype(dtype)}
    expect = remaining_matches(m, "fold-clip") != []
    result = check_rewrite(m, "fold-clip", feeds, expect_rewrite=expect)
    assert remaining_matches(result.model, "fold-clip") == []
    want = feeds["x"]
    if lo is not None:
        want = np.maximum(want, dtype(lo))
    if hi is not None:
        want = np.minimum(want, dtype(hi))
    np.testing.assert_array_equal(ort_run(result.model, feeds)[0], want)


def test_clip_inside_if_branch_is_rewritten():
    """Passes reach If/Loop bodies (exports put clamps inside control flow too)."""
    from onnx import helper

    branch = helper.make_graph(
        [const("lo64", -0.5, np.float64), node("Cast", ["lo64"], ["lo"], to=FLOAT), node("Clip", ["x", "lo"], ["t"], name="/then/Clip")],
        "then", [], [out("t", FLOAT, [3])],
    )
    other = helper.make_graph([node("Identity", ["x"], ["e"])], "else", [], [out("e", FLOAT, [3])])
    m = model(
        [node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
        [inp("c", onnx.TensorProto.BOOL, []), inp("x", FLOAT, [3])], [out("y", FLOAT, [3])],
    )
    for cond in (True, False):
        result = check_rewrite(m, "fold-clip", {"c": np.array(cond), "x": np.array([-2, 0.1, 3], np.float32)})
    assert result.matched == 1 and result.rewritten == 1
    then = next(a.g for a in result.model.graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in then.node] == ["Clip"]
