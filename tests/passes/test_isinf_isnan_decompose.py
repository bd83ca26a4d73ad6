"""isinf-isnan-decompose: fixtures (with infs and NaNs fed), ONNX IsInf/IsNaN node cases, random inputs vs onnxruntime, gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, FLOAT16, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.verify.inputs import make_inputs
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

FIXTURES = [fx for group, fx in all_fixtures() if group == "isinf_isnan_decompose"]
PASS = "isinf-isnan-decompose"
ELEM = {np.float32: FLOAT, np.float16: FLOAT16, np.float64: TensorProto.DOUBLE}


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


def _spike(feeds: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """The verification feeds with infs, NaNs and huge finite values planted in every float input."""
    r = np.random.default_rng(seed)
    out_feeds = {}
    for name, v in feeds.items():
        v = v.copy()
        if v.dtype.kind == "f":
            flat = v.reshape(-1)
            picks = r.integers(0, flat.size, max(2, flat.size // 5))
            flat[picks] = r.choice([np.inf, -np.inf, np.nan, np.finfo(v.dtype).max, -np.finfo(v.dtype).max], picks.size)
        out_feeds[name] = v
    return out_feeds


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, PASS, seed=7)
    assert not {"IsInf", "IsNaN"} & set(_ops(result.model))
    feeds = _spike(make_inputs(fx.build(), fx.input_shapes, fx.val_range, seed=7)[0], 7)
    check_rewrite(fx.build(), PASS, feeds)
    for v in ("7.0", "8.0", "8.2", "8.5", "8.5.3"):
        assert not [f for f in check_model(result.model, v).findings if f.rule == "no-importer"], v


def test_widening_cast_is_looked_through():
    """The exporters' Cast to DOUBLE/FLOAT before IsInf goes (TensorRT has no DOUBLE tensors)."""
    for name in ("legacy_isinf_masked_fill", "dynamo_isinf_any_fp16"):
        fx = next(f for f in FIXTURES if f.name == name)
        result = passes.get(PASS).apply(fx.build())
        casts = [n for n in result.model.graph.node if n.op_type == "Cast"]
        assert all(a.i != TensorProto.DOUBLE for n in casts for a in n.attribute), name
        assert len(casts) == len([n for n in fx.build().graph.node if n.op_type == "Cast"]) - 1, name


def test_narrowing_cast_is_not_looked_through():
    """Cast(double -> float) turns 1e300 into inf: IsInf must see the narrowed value."""
    m = model([node("Cast", ["x"], ["f"], to=TensorProto.FLOAT), node("IsInf", ["f"], ["y"])],
              [inp("x", TensorProto.DOUBLE, [3])], [out("y", BOOL, [3])], opset=13)
    result = check_rewrite(m, PASS, {"x": np.array([1e300, -1e300, 1.0])})
    assert ort_run(result.model, {"x": np.array([1e300, -1e300, 1.0])})[0].tolist() == [True, True, False]


@pytest.mark.parametrize("op", ["IsInf", "IsNaN"])
def test_check_flags_the_original(op):
    fx = next(f for f in FIXTURES if op in _ops(f.build()))
    assert [f.fix_pass for f in check_model(fx.build(), "8.0").findings if f.rule == "no-importer"] == [PASS]


CASES = node_cases("IsInf") + node_cases("IsNaN")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 20)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        result = check_rewrite(m, PASS, feeds)
        assert not {"IsInf", "IsNaN"} & set(_ops(result.model))
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op,trt,rewritten", [
    ("IsInf", "6.0", 0), ("IsInf", "7.0", 1), ("IsInf", "8.2", 1), ("IsInf", "8.5.3", 1), ("IsInf", "8.6", 0), ("IsInf", "10.1", 0),
    ("IsNaN", "7.0", 1), ("IsNaN", "8.0", 1), ("IsNaN", "8.2-EA", 0), ("IsNaN", "8.2", 0), ("IsNaN", "8.5", 0),
])
def test_version_boundaries(op, trt, rewritten):
    m = model([node(op, ["x"], ["y"])], [inp("x", FLOAT, [2, 3])], [out("y", BOOL, [2, 3])], opset=13)
    assert passes.get(PASS).apply(m, trt=trt).rewritten == rewritten


def _check_random(op, shape, dtype, detect, cast_to, dynamic, seed):
    dims = [f"d{i}" if dynamic else d for i, d in enumerate(shape)]
    attrs = {"detect_positive": detect[0], "detect_negative": detect[1]} if op == "IsInf" else {}
    nodes, src = [], "x"
    # Narrowing to fp16 is left out: onnxruntime runs fp16 Abs/Equal as Cast-up, fp32 op, and then
    # removes the Cast(fp32->fp16)->Cast(fp16->fp32) pair, so its overflow to inf never happens.
    if cast_to is not None and np.dtype(cast_to).itemsize >= np.dtype(dtype).itemsize:
        nodes.append(node("Cast", ["x"], ["c"], to=ELEM[cast_to]))
        src = "c"
    nodes.append(node(op, [src], ["y"], **attrs))
    m = model(nodes, [inp("x", ELEM[dtype], dims)], [out("y", BOOL, dims)], opset=20)
    r = np.random.default_rng(seed)
    with np.errstate(over="ignore"):  # huge values overflow to inf in fp16: more infs
        x = (r.standard_normal(shape) * r.choice([1.0, 1e4, 1e38])).astype(dtype)
    if x.size:
        flat = x.reshape(-1)
        picks = r.integers(0, flat.size, max(1, flat.size // 3))
        flat[picks] = r.choice([np.inf, -np.inf, np.nan, 0.0, -0.0, np.finfo(dtype).max, np.finfo(dtype).tiny], picks.size)
    result = check_rewrite(m, PASS, {"x": x})
    assert op not in _ops(result.model)


CONFIG = dict(
    shape=st.lists(st.integers(1, 6), min_size=0, max_size=4),
    dtype=st.sampled_from([np.float32, np.float16, np.float64]),
    detect=st.sampled_from([(1, 1), (1, 0), (0, 1), (0, 0)]),
    cast_to=st.sampled_from([None, np.float32, np.float64, np.float16]),
    dynamic=st.booleans(),
    seed=st.integers(0, 2**16),
)


@pytest.mark.parametrize("op", ["IsInf", "IsNaN"])
def test_random_inputs_equal_onnxruntime(op):
    settings(max_examples=40, deadline=None)(given(op=st.just(op), **CONFIG)(_check_random))()


@pytest.mark.slow
@pytest.mark.parametrize("op", ["IsInf", "IsNaN"])
def test_random_inputs_equal_onnxruntime_slow(op):
    settings(max_examples=300, deadline=None)(given(op=st.just(op), **CONFIG)(_check_random))()
