"""scatternd-cast: fixtures, the ONNX ScatterND node cases, random type/reduction combinations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, FLOAT16, INT32, INT64, init, inp, model, node, out
from graphfix import passes
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    freeze_inputs,
    node_cases,
    ort_run,
    remaining_matches,
    runnable,
)

FIXTURES = [fx for group, fx in all_fixtures() if group == "scatternd_cast"]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "scatternd-cast", seed=4)
    for n in result.model.graph.node:
        assert not any(a.name == "reduction" for a in n.attribute)


def test_runtime_index_reductions_are_left_to_scatternd_decompose():
    from fixtures.recipes.scatternd_decompose import scatter_max_runtime_indices

    m = scatter_max_runtime_indices()
    assert passes.get("scatternd-cast").apply(m).matched == 0
    assert passes.get("scatternd-decompose").apply(m, trt="8.6").rewritten == 1


def test_int64_is_native_from_trt_9():
    fx = FIXTURES[0]
    assert passes.get("scatternd-cast").apply(fx.build(), trt="9.0").matched == 0
    assert passes.get("scatternd-cast").apply(fx.build(), trt="8.6").rewritten == 1


@pytest.mark.parametrize("case", node_cases("ScatterND"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    for inputs, expected in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        m = freeze_inputs(runnable(case.model, 18), {"indices": feeds.pop("indices")})
        reduction = any(a.name == "reduction" for a in case.model.graph.node[0].attribute)
        result = check_rewrite(m, "scatternd-cast", feeds, expect_rewrite=reduction)
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)


TYPES = {np.float32: FLOAT, np.float16: FLOAT16, np.int32: INT32, np.int64: INT64, np.bool_: BOOL}


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(list(TYPES)),
    reduction=st.sampled_from([None, "none", "add", "mul", "max", "min"]),
    rows=st.lists(st.integers(0, 4), min_size=1, max_size=6),
    width=st.integers(1, 3),
)
def test_random_scatters(dtype, reduction, rows, width):
    if dtype in (np.bool_, np.float16) and reduction not in (None, "none"):
        reduction = None  # ONNX has no BOOL reductions; onnxruntime has no float16 ones to compare with
    if reduction in (None, "none") and len(set(rows)) != len(rows):
        rows = sorted(set(rows))  # plain ScatterND with duplicates is unspecified
    attrs = {} if reduction is None else {"reduction": reduction}
    idx = np.array(rows, np.int64).reshape(-1, 1)
    m = model([node("ScatterND", ["x", "idx", "u"], ["y"], **attrs)],
              [inp("x", TYPES[dtype], [5, width]), inp("u", TYPES[dtype], [len(rows), width])],
              [out("y", TYPES[dtype], [5, width])], [init("idx", idx)], opset=18)
    rng = np.random.default_rng(len(rows) * 10 + width)
    feeds = {"x": (rng.integers(-3, 4, (5, width))).astype(dtype), "u": (rng.integers(-3, 4, (len(rows), width))).astype(dtype)}
    expect = remaining_matches(m, "scatternd-cast") != []
    check_rewrite(m, "scatternd-cast", feeds, expect_rewrite=expect, atol=1e-3 if dtype == np.float16 else 1e-6)
