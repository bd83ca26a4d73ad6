"""round-sign-decompose: fixtures, ONNX Round/Sign node cases, every fp16 value, random inputs vs onnxruntime, gating."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, INT32, INT64, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

FIXTURES = [fx for group, fx in all_fixtures() if group == "round_sign_decompose"]
PASS = "round-sign-decompose"
ELEM = {np.float32: FLOAT, np.float16: FLOAT16, np.float64: TensorProto.DOUBLE, np.int32: INT32, np.int64: INT64,
        np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}
OPSET = {"Round": 11, "Sign": 13}


def _single(op: str, dims: list, elem: int = FLOAT):
    return model([node(op, ["x"], ["y"])], [inp("x", elem, dims)], [out("y", elem, dims)], opset=OPSET[op])


def _ops(m) -> list[str]:
    return [n.op_type for n in m.graph.node]


def _rewritten(op: str, elem: int, n: int):
    result = passes.get(PASS).apply(_single(op, [n], elem))
    assert result.rewritten == 1 and op not in _ops(result.model)
    return result.model


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, PASS, seed=8)
    assert not {"Round", "Sign"} & set(_ops(result.model))
    for v in ("7.0", "7.2", "8.0"):
        assert not [f for f in check_model(result.model, v).findings if f.rule == "no-importer"], v


@pytest.mark.parametrize("op", ["Round", "Sign"])
def test_check_flags_the_original(op):
    fx = next(f for f in FIXTURES if op in _ops(f.build()))
    assert [f.fix_pass for f in check_model(fx.build(), "8.0").findings if f.rule == "no-importer"] == [PASS]


@pytest.mark.parametrize("op", ["Round", "Sign"])
def test_every_fp16_value_equals_numpy(op):
    """All 65536 fp16 bit patterns (halves, odd/even ties, subnormals, inf, NaN): exact."""
    x = np.arange(65536, dtype=np.uint16).view(np.float16)
    got = ort_run(_rewritten(op, FLOAT16, x.size), {"x": x})[0]
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, np.round(x) if op == "Round" else np.sign(x))


def test_round_ties_and_large_values_fp32():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 8388607.5, -8388606.5, 8388609.0,
                  16777216.0, 3.4e38, -3.4e38, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 0.0, -0.0], np.float32)
    got = ort_run(_rewritten("Round", FLOAT, x.size), {"x": x})[0]
    np.testing.assert_array_equal(got, np.round(x))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8, np.float64])
def test_sign_of_other_types(dtype):
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else np.finfo(dtype)
    x = np.array([info.min, -3, -1, 0, 1, 5, info.max] if np.dtype(dtype).kind != "u" else [0, 1, 5, info.max], dtype)
    check_rewrite(_single("Sign", [x.size], ELEM[dtype]), PASS, {"x": x})
    np.testing.assert_array_equal(ort_run(_rewritten("Sign", ELEM[dtype], x.size), {"x": x})[0], np.sign(x))


CASES = node_cases("Round") + node_cases("Sign")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, OPSET[case.model.graph.node[0].op_type])
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        result = check_rewrite(m, PASS, feeds)
        assert not {"Round", "Sign"} & set(_ops(result.model))
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op,trt,rewritten", [
    ("Round", "6.0", 0), ("Round", "7.0", 1), ("Round", "7.2-ngc21.05", 1), ("Round", "8.0", 1), ("Round", "8.2-EA", 0),
    ("Round", "8.2", 0), ("Sign", "7.1", 1), ("Sign", "8.0-EA", 1), ("Sign", "8.2-EA", 0), ("Sign", "10.1", 0),
])
def test_version_boundaries(op, trt, rewritten):
    assert passes.get(PASS).apply(_single(op, [2, 3]), trt=trt).rewritten == rewritten


def _check_random(op, shape, dtype, scale, dynamic, seed):
    dims = [f"d{i}" if dynamic else d for i, d in enumerate(shape)]
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        x = r.standard_normal(shape) * scale
        x = np.where(r.random(shape) < 0.3, np.round(x * 2) / 2, x)  # plant exact .5 ties
        if x.size:
            flat = x.reshape(-1)
            picks = r.integers(0, flat.size, max(1, flat.size // 5))
            flat[picks] = r.choice([np.inf, -np.inf, np.nan, 0.0, -0.0], picks.size)
        with np.errstate(over="ignore"):
            x = x.astype(dtype)
    else:
        info = np.iinfo(dtype)
        x = r.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    m = _single(op, dims, ELEM[dtype])
    # onnxruntime's fp16 Sign returns 0 for NaN (its fp32 Sign and numpy return NaN): compare with
    # the native op on NaN-free values there, and with numpy on everything.
    native_ok = x if (op, dtype) != ("Sign", np.float16) else np.where(np.isnan(x), np.float16(1), x)
    check_rewrite(m, PASS, {"x": native_ok}, atol=0, rtol=0)
    result = passes.get(PASS).apply(m)
    assert op not in _ops(result.model)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(ort_run(result.model, {"x": x})[0], np.round(x) if op == "Round" else np.sign(x))


def _config(op: str) -> dict:
    types = [np.float32, np.float16] + ([np.int32, np.int64] if op == "Sign" else [])
    return dict(
        op=st.just(op),
        shape=st.lists(st.integers(1, 6), min_size=0, max_size=4),
        dtype=st.sampled_from(types),
        scale=st.sampled_from([1.0, 8.0, 3000.0, 1e7]),
        dynamic=st.booleans(),
        seed=st.integers(0, 2**16),
    )


@pytest.mark.parametrize("op", ["Round", "Sign"])
def test_random_inputs_equal_onnxruntime(op):
    settings(max_examples=40, deadline=None)(given(**_config(op))(_check_random))()


@pytest.mark.slow
@pytest.mark.parametrize("op", ["Round", "Sign"])
def test_random_inputs_equal_onnxruntime_slow(op):
    settings(max_examples=300, deadline=None)(given(**_config(op))(_check_random))()
