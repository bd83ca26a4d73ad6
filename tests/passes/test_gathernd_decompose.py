"""gathernd-decompose: fixtures, ONNX GatherND node cases, random configurations vs onnxruntime, version gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    freeze_inputs,
    node_cases,
    ort_run,
    runnable,
)

FIXTURES = [fx for group, fx in all_fixtures() if group == "gathernd_decompose"]
ELEM = {np.float32: FLOAT, np.int64: INT64, np.bool_: BOOL}
GONE = ("GatherND",)


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "gathernd-decompose", seed=3)
    assert "GatherND" not in _ops(result.model)
    report = check_model(result.model, "8.0")
    assert not [f for f in report.findings if f.rule == "no-importer" and f.op != "NonZero"], report.as_dict()


def test_masking_indices_are_known_nonnegative():
    """NonZero -> Transpose indices need no negative-index Where: one Gather per column, Mul, Add, Gather."""
    fx = next(f for f in FIXTURES if f.name == "masked_select_dynamo")
    ops = _ops(passes.get("gathernd-decompose").apply(fx.build()).model)
    assert "Where" not in ops and "Less" not in ops and ops.count("Gather") >= 3


def test_constant_indices_become_one_constant_gather():
    m = model([node("GatherND", ["x", "i"], ["y"], batch_dims=1)], [inp("x", FLOAT, [2, 3, 4])], [out("y", FLOAT, [2, 2])],
              [init("i", np.array([[[0, -1], [2, 3]], [[1, 1], [-3, 0]]], np.int64))])
    result = check_rewrite(m, "gathernd-decompose", {"x": np.random.default_rng(0).random((2, 3, 4), np.float32)})
    assert _ops(result.model) == ["Reshape", "Gather"]


@pytest.mark.parametrize("trt,rewritten", [("7.2", 1), ("8.0", 1), ("8.2", 0), ("8.6", 0), ("10.1", 0)])
def test_version_gating(trt, rewritten):
    assert passes.get("gathernd-decompose").apply(FIXTURES[0].build(), trt=trt).rewritten == rewritten


@pytest.mark.parametrize("case", node_cases("GatherND"), ids=lambda c: c.name)
@pytest.mark.parametrize("frozen", [False, True], ids=["runtime", "constant"])
def test_onnx_node_cases(case, frozen):
    for inputs, expected in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        m = runnable(case.model, 13)
        if frozen:
            m = freeze_inputs(m, {"indices": feeds.pop("indices")})
        result = check_rewrite(m, "gathernd-decompose", feeds)
        assert "GatherND" not in _ops(result.model)
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_array_equal(got, want)


@st.composite
def gathernd_configs(draw):
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    batch = draw(st.integers(0, rank - 1))
    k = draw(st.integers(1, rank - batch))
    inner = draw(st.lists(st.integers(1, 3), max_size=2))
    return shape, batch, k, inner, draw(st.sampled_from(list(ELEM))), draw(st.booleans()), draw(st.booleans()), draw(st.integers(0, 2**16))


def _run_config(config):
    shape, batch, k, inner, dtype, dynamic, constant, seed = config
    rng = np.random.default_rng(seed)
    ishape = [*shape[:batch], *inner, k]
    sizes = np.array(shape[batch : batch + k])
    idx = (rng.integers(0, 2**31, ishape) % (2 * sizes) - sizes).astype(np.int64)  # [-dim, dim)
    oshape = [*ishape[:-1], *shape[batch + k :]]
    data = (rng.integers(-50, 50, shape) if dtype != np.bool_ else rng.random(shape) > 0.5).astype(dtype)
    if dtype == np.float32:
        data = data + rng.random(shape, np.float32)
    dims = [f"d{j}" for j in range(len(shape))] if dynamic else shape
    idims = [*(dims[:batch]), *([f"m{j}" for j in range(len(inner))] if dynamic else inner), k]
    inputs = [inp("x", ELEM[dtype], dims)] + ([] if constant else [inp("i", INT64, idims)])
    m = model([node("GatherND", ["x", "i"], ["y"], batch_dims=batch)], inputs, [out("y", ELEM[dtype], [*idims[:-1], *dims[batch + k :]])],
              [init("i", idx)] if constant else [], opset=13)
    feeds = {"x": data} if constant else {"x": data, "i": idx}
    result = check_rewrite(m, "gathernd-decompose", feeds)
    assert "GatherND" not in _ops(result.model)
    assert ort_run(result.model, feeds)[0].shape == tuple(oshape)


@settings(max_examples=40, deadline=None)
@given(config=gathernd_configs())
def test_random_gathernd(config):
    _run_config(config)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(config=gathernd_configs())
def test_random_gathernd_slow(config):
    _run_config(config)
