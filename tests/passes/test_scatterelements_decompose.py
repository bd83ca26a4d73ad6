"""scatterelements-decompose: fixtures, ONNX ScatterElements node cases, random configurations vs onnxruntime, gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, INT32, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.passes._indexing import MAX_GRID_ELEMENTS
from tests.helpers.support import (
    check_fixture,
    check_rewrite,
    check_scatter_node_case,
    node_cases,
)

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "scatterelements_decompose"}
ELEM = {np.float32: FLOAT, np.int64: INT64, np.bool_: BOOL, np.int32: INT32}
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "scatterelements-decompose", seed=3, atol=1e-5, rtol=1e-5)
    assert "ScatterElements" not in _ops(result.model)
    for v in ("7.2", "8.0"):
        assert not [f for f in check_model(result.model, v).findings if f.rule == "no-importer"]


def _scatter(shape, ishape, axis, reduction="none", constant=None, dtype=np.float32, itype=np.int64):
    attrs = {"axis": axis} if reduction == "none" else {"axis": axis, "reduction": reduction}
    inputs = [inp("x", ELEM[dtype], shape), inp("u", ELEM[dtype], ishape)] + ([] if constant is not None else [inp("i", ELEM[itype], ishape)])
    return model([node("ScatterElements", ["x", "i", "u"], ["y"], **attrs)], inputs, [out("y", ELEM[dtype], shape)],
                 [init("i", constant)] if constant is not None else [], opset=18)


def test_grid_is_per_row_and_bounded():
    """[rows, D] data and [rows, I] indices: the grid is rows x D x I, and above the limit a finding."""
    rows, d, i = 64, 512, MAX_GRID_ELEMENTS // (64 * 512) + 1
    result = passes.get("scatterelements-decompose").apply(_scatter([rows, d], [rows, i], 1))
    assert result.rewritten == 0 and "one-hot grid" in result.findings[0].message
    small = _scatter([3, 6], [2, 4], 1, "add")  # indices cover two of three rows: the third is sliced off and back
    rng = np.random.default_rng(0)
    feeds = {"x": rng.random((3, 6), np.float32), "u": rng.random((2, 4), np.float32), "i": rng.integers(-6, 6, (2, 4))}
    assert "Concat" in _ops(check_rewrite(small, "scatterelements-decompose", feeds, atol=1e-6).model)


@pytest.mark.parametrize("reduction,trt,rewritten", [
    ("none", "7.2", 1), ("none", "8.0", 1), ("none", "8.2", 0), ("none", "10.1", 0),
    ("add", "8.0", 1), ("add", "8.2", 1), ("max", "9.3", 1), ("max", "10.0", 0), ("mul", "11.1", 0),
])
def test_version_gating(reduction, trt, rewritten):
    m = _scatter([4, 3], [2, 3], 0, reduction)
    assert passes.get("scatterelements-decompose").apply(m, trt=trt).rewritten == rewritten


@pytest.mark.parametrize("case", node_cases("ScatterElements"), ids=lambda c: c.name)
@pytest.mark.parametrize("frozen", [False, True], ids=["runtime", "constant"])
def test_onnx_node_cases(case, frozen):
    check_scatter_node_case(case, frozen, "scatterelements-decompose")


@st.composite
def scatterelements_configs(draw):
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    ishape = [draw(st.integers(1, 5)) if j == axis % rank else draw(st.integers(1, d)) for j, d in enumerate(shape)]
    dtype = draw(st.sampled_from([np.float32, np.int64, np.bool_]))
    reduction = draw(st.sampled_from(REDUCTIONS if dtype != np.bool_ else ["none"]))
    flags = draw(st.tuples(st.booleans(), st.booleans(), st.sampled_from([np.int64, np.int32])))
    return shape, ishape, axis, dtype, reduction, *flags, draw(st.integers(0, 2**16))


def _run_config(config):
    shape, ishape, axis, dtype, reduction, dynamic, constant, itype, seed = config
    rng = np.random.default_rng(seed)
    size = shape[axis]
    idx = (rng.integers(-size, size, ishape)).astype(itype)  # duplicates and negatives
    if dtype == np.bool_:
        data, upd = rng.random(shape) > 0.5, rng.random(ishape) > 0.5
    else:
        data, upd = rng.integers(-4, 5, shape).astype(dtype), rng.integers(-4, 5, ishape).astype(dtype)
        if dtype == np.float32 and reduction != "mul":
            data, upd = data + rng.random(shape, np.float32), upd + rng.random(ishape, np.float32)
    m = _scatter(shape, ishape, axis, reduction, idx if constant else None, dtype, itype)
    if dynamic:
        for vi in [*m.graph.input, *m.graph.output]:
            for j, d in enumerate(vi.type.tensor_type.shape.dim):
                d.dim_param = f"{'x' if vi.name == 'y' else 'i' if vi.name == 'u' else vi.name}{j}"
    feeds = {"x": data, "u": upd} | ({} if constant else {"i": idx})
    result = check_rewrite(m, "scatterelements-decompose", feeds, atol=1e-5, rtol=1e-5)
    assert "ScatterElements" not in _ops(result.model)


@settings(max_examples=40, deadline=None)
@given(config=scatterelements_configs())
def test_random_scatterelements(config):
    _run_config(config)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(config=scatterelements_configs())
def test_random_scatterelements_slow(config):
    _run_config(config)


def _expanded_column(axis: int, rank: int, dynamic: bool):
    """torch_geometric's message passing: ``out.scatter_add_(axis, index.view(...).expand_as(src), src)``,
    one index per slice along ``axis``, repeated over every other axis by an Expand."""
    data_shape = ["N" if j == axis else f"f{j}" for j in range(rank)] if dynamic else [7 if j == axis else 3 for j in range(rank)]
    upd_shape = ["E" if j == axis else f"f{j}" for j in range(rank)] if dynamic else [11 if j == axis else 3 for j in range(rank)]
    column = [-1 if j == axis else 1 for j in range(rank)]
    nodes = [node("Reshape", ["i", "column_shape"], ["col"]), node("Shape", ["u"], ["u_shape"]),
             node("Expand", ["col", "u_shape"], ["idx"]),
             node("ScatterElements", ["x", "idx", "u"], ["y"], axis=axis, reduction="add")]
    return model(nodes, [inp("x", FLOAT, data_shape), inp("i", INT64, ["E" if dynamic else 11]), inp("u", FLOAT, upd_shape)],
                 [out("y", FLOAT, data_shape)], [init("column_shape", np.array(column, np.int64))], opset=18)


def _assert_same_bits(expected: np.ndarray, actual: np.ndarray) -> None:
    """Equal values, NaN where NaN, and the sign of every zero (an untouched -0.0 stays -0.0)."""
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    zeros = expected == 0
    np.testing.assert_array_equal(np.signbit(actual[zeros]), np.signbit(expected[zeros]))


@settings(max_examples=30, deadline=None)
@given(rank=st.integers(1, 3), axis_pick=st.integers(0, 2), dynamic=st.booleans(), seed=st.integers(0, 2**16),
       specials=st.booleans())
def test_repeated_index_column_sums_by_matmul(rank, axis_pick, dynamic, seed, specials):
    """The graph-network scatter-add is one one-hot MatMul (not a per-row grid, ~400x onnxruntime's
    native op at 1000 nodes / 5000 edges) and still exact: +-inf and NaN updates give IEEE sums, rows
    no edge reaches keep their data bit for bit (-0.0 included), negative indices count from the end."""
    axis = axis_pick % rank
    m = _expanded_column(axis, rank, dynamic)
    rng = np.random.default_rng(seed)
    n, e = 7, 11
    x = rng.standard_normal([n if j == axis else 3 for j in range(rank)]).astype(np.float32)
    u = rng.standard_normal([e if j == axis else 3 for j in range(rank)]).astype(np.float32)
    x.flat[:: 3] = -0.0
    if specials:
        u.flat[rng.integers(0, u.size, 4)] = np.array([np.inf, -np.inf, np.nan, np.inf], np.float32)
    i = rng.integers(-n, n - 2, e).astype(np.int64)  # duplicates, negatives, and rows no edge reaches
    feeds = {"x": x, "i": i, "u": u}
    result = check_rewrite(m, "scatterelements-decompose", feeds, atol=1e-5, rtol=1e-5)
    ops = _ops(result.model)
    assert "ScatterElements" not in ops and "MatMul" in ops
    from tests.helpers.support import ort_run

    _assert_same_bits(ort_run(m, feeds)[0], ort_run(result.model, feeds)[0])
