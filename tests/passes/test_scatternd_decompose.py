"""scatternd-decompose: fixtures, ONNX ScatterND node cases, random configurations vs onnxruntime, limits, gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.passes._indexing import MAX_GRID_ELEMENTS
from tests.helpers.support import (
    check_fixture,
    check_rewrite,
    check_scatter_node_case,
    node_cases,
    ort_run,
)

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "scatternd_decompose"}
ELEM = {np.float32: FLOAT, np.int64: INT64, np.bool_: BOOL}
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "scatternd-decompose", seed=3, atol=1e-5, rtol=1e-5)
    assert "ScatterND" not in _ops(result.model)
    for v in ("7.2", "8.0"):
        assert not [f for f in check_model(result.model, v).findings if f.rule == "no-importer"]


def test_constant_indices_are_one_concat_gather_and_the_last_duplicate_wins():
    fx = FIXTURES["constant_duplicates"]
    result = check_rewrite(fx.build(), "scatternd-decompose", {"x": np.zeros((6, 4), np.float32), "y": np.arange(16, dtype=np.float32).reshape(4, 4)})
    assert _ops(result.model) == ["Concat", "Gather"]
    got = ort_run(result.model, {"x": np.zeros((6, 4), np.float32), "y": np.arange(16, dtype=np.float32).reshape(4, 4)})[0]
    np.testing.assert_array_equal(got[1], [8, 9, 10, 11])  # rows 0 and 2 of y both target row 1: the last wins


def test_factored_last_writer_with_duplicates():
    """(y, x) writes into [12, 10, 3]: one-hots of 12 x U and U x 10 and a MatMul, not 120 x U; repeats: the last wins."""
    rng = np.random.default_rng(1)
    idx = np.concatenate([rng.integers(0, 12, (40, 1)), rng.integers(0, 10, (40, 1))], 1)
    idx[30:] = idx[:10]  # ten duplicated cells, written twice
    feeds = {"x": rng.random((12, 10, 3), np.float32), "u": rng.random((40, 3), np.float32), "i": idx}
    result = check_rewrite(_scatter([12, 10, 3], [40, 2]), "scatternd-decompose", feeds)
    assert "MatMul" in _ops(result.model)
    got = ort_run(result.model, feeds)[0]
    np.testing.assert_array_equal(got[tuple(idx[5])], feeds["u"][35])
    assert not [f for f in check_model(result.model, "8.0").findings if f.rule == "no-importer"]


def test_later_pass_skips_the_replaced_node():
    """scatternd-cast (order 20) must not rewrite the dead ScatterND scatternd-decompose replaced."""
    import graphfix

    result = graphfix.fix(_scatter([5, 3], [2, 1], dtype=np.bool_), ["scatternd-decompose", "scatternd-cast"])
    records = {r.name: r for r in result.report.passes}
    assert records["scatternd-decompose"].verdict == "kept"
    assert records["scatternd-cast"].verdict == "unchanged" and records["scatternd-cast"].matched == 0


def _scatter(shape, ishape, reduction="none", constant=None, dtype=np.float32, opset=18):
    k = ishape[-1]
    ushape = [*ishape[:-1], *shape[k:]]
    attrs = {} if reduction == "none" else {"reduction": reduction}
    inputs = [inp("x", ELEM[dtype], shape), inp("u", ELEM[dtype], ushape)] + ([] if constant is not None else [inp("i", INT64, ishape)])
    return model([node("ScatterND", ["x", "i", "u"], ["y"], **attrs)], inputs, [out("y", ELEM[dtype], shape)],
                 [init("i", constant)] if constant is not None else [], opset=opset)


def test_grid_above_the_limit_is_a_finding():
    rows, updates = 4096, MAX_GRID_ELEMENTS // 4096 + 1
    result = passes.get("scatternd-decompose").apply(_scatter([rows, 2], [updates, 1]))
    assert result.rewritten == 0 and "one-hot grid" in result.findings[0].message and str(MAX_GRID_ELEMENTS) in result.findings[0].message
    with_rows = passes.get("scatternd-decompose").apply(_scatter([1024, 64, 4], [200, 1], "add"))  # 1024 x 200 x 256 > 2^25
    assert with_rows.rewritten == 0 and "row size" in with_rows.findings[0].message


@pytest.mark.parametrize("reduction,constant,trt,rewritten", [
    ("none", False, "8.0", 1), ("none", False, "8.2", 0), ("none", True, "7.2", 1), ("none", True, "10.1", 0),
    ("add", True, "8.0", 1), ("add", True, "8.2", 0),  # constant-index reductions >= 8.2 are scatternd-cast's
    ("max", False, "8.2", 1), ("max", False, "9.3", 1), ("max", False, "10.0", 1), ("max", False, "11.1", 1),
])
def test_version_gating(reduction, constant, trt, rewritten):
    m = _scatter([5, 3], [2, 1], reduction, np.array([[1], [3]], np.int64) if constant else None)
    assert passes.get("scatternd-decompose").apply(m, trt=trt).rewritten == rewritten


def test_runtime_reduction_claimed_once():
    """scatternd-cast takes constant-index reductions, this pass runtime ones: never both."""
    runtime, constant = _scatter([5, 3], [2, 1], "max"), _scatter([5, 3], [2, 1], "max", np.array([[1], [3]], np.int64))
    for v in ("8.2", "8.6", "10.1"):
        assert [f.fix_pass for f in check_model(runtime, v).findings if f.fix_pass] == ["scatternd-decompose"]
        assert [f.fix_pass for f in check_model(constant, v).findings if f.fix_pass] == ["scatternd-cast"]


@pytest.mark.parametrize("case", node_cases("ScatterND"), ids=lambda c: c.name)
@pytest.mark.parametrize("frozen", [False, True], ids=["runtime", "constant"])
def test_onnx_node_cases(case, frozen):
    check_scatter_node_case(case, frozen, "scatternd-decompose")


@st.composite
def scatternd_configs(draw):
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    k = draw(st.integers(1, rank))
    outer = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    dtype = draw(st.sampled_from(list(ELEM)))
    reduction = draw(st.sampled_from(REDUCTIONS if dtype != np.bool_ else ["none"]))
    return shape, k, outer, dtype, reduction, draw(st.booleans()), draw(st.booleans()), draw(st.integers(0, 2**16))


def _run_config(config):
    shape, k, outer, dtype, reduction, dynamic, constant, seed = config
    rng = np.random.default_rng(seed)
    sizes = np.array(shape[:k])
    idx = (rng.integers(0, 2**31, [*outer, k]) % (2 * sizes) - sizes).astype(np.int64)  # duplicates and negatives
    ushape = [*outer, *shape[k:]]
    if dtype == np.bool_:
        data, upd = rng.random(shape) > 0.5, rng.random(ushape) > 0.5
    else:
        data, upd = rng.integers(-4, 5, shape).astype(dtype), rng.integers(-4, 5, ushape).astype(dtype)
        if dtype == np.float32 and reduction != "mul":
            data, upd = data + rng.random(shape, np.float32), upd + rng.random(ushape, np.float32)
    m = _scatter(shape, [*outer, k], reduction, idx if constant else None, dtype)
    if dynamic:  # symbolic dims everywhere but the index width (exports always know it)
        for vi in [*m.graph.input, *m.graph.output]:
            dims = vi.type.tensor_type.shape.dim
            for j, d in enumerate(dims[:-1] if vi.name == "i" else dims):
                d.dim_param = f"{vi.name}{j}"
    feeds = {"x": data, "u": upd} | ({} if constant else {"i": idx})
    result = check_rewrite(m, "scatternd-decompose", feeds, atol=1e-5, rtol=1e-5)  # float add/mul of duplicates: order differs
    assert "ScatterND" not in _ops(result.model)


@settings(max_examples=40, deadline=None)
@given(config=scatternd_configs())
def test_random_scatternd(config):
    _run_config(config)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(config=scatternd_configs())
def test_random_scatternd_slow(config):
    _run_config(config)
