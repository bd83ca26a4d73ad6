"""bool-gather-cast: fixtures, ONNX Gather* node cases with BOOL data, random shapes, version gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, INT64, inp, model, node, out
from graphfix import passes
from tests.helpers.support import check_fixture, check_rewrite, ort_run

FIXTURES = [fx for group, fx in all_fixtures() if group == "bool_gather_cast"]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_identical(fx):
    result = check_fixture(fx, "bool-gather-cast", seed=2)
    producers = {o: n for n in result.model.graph.node for o in n.output}
    for n in result.model.graph.node:
        if n.op_type.startswith("Gather"):
            assert producers[n.input[0]].op_type == "Cast"


def _where_bool():
    return model([node("Where", ["c", "a", "b"], ["y"])], [inp("c", BOOL, [3, 4]), inp("a", BOOL, [3, 4]), inp("b", BOOL, [3, 4])],
                 [out("y", BOOL, [3, 4])])


def test_where_on_bool_values():
    """onnxruntime has no BOOL Where kernel, so the original cannot run: compare with numpy."""
    result = passes.get("bool-gather-cast").apply(_where_bool())
    assert result.rewritten == 1
    rng = np.random.default_rng(0)
    feeds = {k: rng.random((3, 4)) > 0.5 for k in "cab"}
    np.testing.assert_array_equal(ort_run(result.model, feeds)[0], np.where(feeds["c"], feeds["a"], feeds["b"]))


def test_target_version_gating():
    m = FIXTURES[0].build()
    assert passes.get("bool-gather-cast").apply(m, trt="8.6").rewritten == 0
    assert passes.get("bool-gather-cast").apply(m, trt="8.5").rewritten == 0
    assert passes.get("bool-gather-cast").apply(m, trt="8.4").rewritten == 2  # the Where's x/y are float here
    assert passes.get("bool-gather-cast").apply(_where_bool(), trt="8.2").rewritten == 1
    assert passes.get("bool-gather-cast").apply(_where_bool(), trt="8.4").rewritten == 0


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), axis_seed=st.integers(0, 100), op=st.sampled_from(["Gather", "GatherElements"]))
def test_random_bool_gathers(shape, axis_seed, op):
    axis = axis_seed % len(shape)
    rng = np.random.default_rng(axis_seed)
    data = rng.random(shape) > 0.5
    if op == "Gather":
        idx = rng.integers(-shape[axis], shape[axis], (3,))
        out_shape = shape[:axis] + [3] + shape[axis + 1 :]
    else:
        idx = rng.integers(-shape[axis], shape[axis], shape)
        out_shape = shape
    m = model([node(op, ["x", "i"], ["y"], axis=axis)], [inp("x", BOOL, shape), inp("i", INT64, list(idx.shape))], [out("y", BOOL, out_shape)])
    check_rewrite(m, "bool-gather-cast", {"x": data, "i": idx.astype(np.int64)})
