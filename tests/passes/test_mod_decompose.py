"""mod-decompose: fixtures, ONNX Mod node cases, version boundaries, random signs/dtypes/fmod."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

FIXTURES = [fx for group, fx in all_fixtures() if group == "mod_decompose"]
INSIDE, OUTSIDE = ["7.0", "7.2", "8.0", "8.2", "8.4", "8.4.3"], ["8.5", "8.6", "10.1"]
ELEM = {np.dtype(t): onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t)) for t in
        (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16, np.float32, np.float64)}


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


def _mod_model(a_shape, b_shape, dtype, fmod: int, opset: int = 13) -> onnx.ModelProto:
    out_shape = np.broadcast_shapes(tuple(a_shape), tuple(b_shape))
    elem = ELEM[np.dtype(dtype)]
    return model([node("Mod", ["a", "b"], ["c"], fmod=fmod)], [inp("a", elem, a_shape), inp("b", elem, b_shape)],
                 [out("c", elem, list(out_shape))], opset=opset)


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "mod-decompose", atol=1e-5, rtol=1e-5)
    assert "Mod" not in _ops(result.model)
    for version in INSIDE:
        assert not [f for f in check_model(result.model, version).findings if f.rule == "no-importer"], version


def test_integer_remainder_follows_python_signs():
    fx = next(f for f in FIXTURES if f.name == "int_remainder_dynamo")
    q = np.arange(-20, 20, dtype=np.int64).reshape(1, 40, 1)
    k = np.zeros((1, 1, 40), np.int64)
    result = check_rewrite(fx.build(), "mod-decompose", {"q_pos": q, "k_pos": k})
    bucket, phase = ort_run(result.model, {"q_pos": q, "k_pos": k})
    rel = q - k
    np.testing.assert_array_equal(bucket, rel % 16)
    np.testing.assert_array_equal(phase, rel % -5)


def test_constant_divisor_of_one_sign_needs_one_comparison():
    fx = next(f for f in FIXTURES if f.name == "int_remainder_dynamo")
    ops = _ops(passes.get("mod-decompose").apply(fx.build()).model)
    # per Mod: the dividend's sign (|x| and the C remainder's sign) and the one floor-rule comparison
    assert ops.count("Less") + ops.count("Greater") == 4 and "Or" not in ops and "And" not in ops


@pytest.mark.parametrize("version,rewrites", [(v, True) for v in INSIDE] + [(v, False) for v in OUTSIDE])
def test_version_boundaries(version, rewrites):
    result = passes.get("mod-decompose").apply(FIXTURES[0].build(), trt=version)  # integer %
    assert (result.rewritten > 0) == rewrites
    assert ("Mod" in _ops(result.model)) != rewrites


def test_float_floor_mod_below_opset_28_is_a_finding():
    m = _mod_model([3], [3], np.float32, 0)
    result = passes.get("mod-decompose").apply(m)
    assert result.rewritten == 0 and "invalid ONNX before opset 28" in result.findings[0].message


@pytest.mark.parametrize("version", ["7.0", "8.4.3", "8.5", "8.6", "10.1", "11.1"])
def test_float_floor_mod_is_rewritten_for_every_release(version):
    fx = next(f for f in FIXTURES if f.name == "float_remainder_opset28")
    result = passes.get("mod-decompose").apply(fx.build(), trt=version)
    assert result.rewritten == 1 and "Mod" not in _ops(result.model)
    x = np.linspace(-10, 10, 21, dtype=np.float32).reshape(7, 3)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], np.mod(x, np.array([2.5, -4.0, 0.75], np.float32)), atol=1e-5)


@pytest.mark.parametrize("case", node_cases("Mod"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 28 if "fmod_0" in case.name else 13)  # float floor-mod needs opset 28
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        result = check_rewrite(m, "mod-decompose", feeds)
        assert "Mod" not in _ops(result.model)
        got = ort_run(result.model, feeds)[0]
        assert got.dtype == expected[0].dtype
        np.testing.assert_allclose(got.astype(np.float64), expected[0].astype(np.float64), rtol=1e-6, atol=0)


# ------------------------------------------------------------------ random cases
INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32]
FLOAT_TYPES = [np.float16, np.float32, np.float64]


@st.composite
def mod_cases(draw):
    shape = draw(st.lists(st.integers(1, 5), min_size=0, max_size=4))
    b_shape = [d if draw(st.booleans()) else 1 for d in shape][draw(st.integers(0, len(shape))):]
    dtype = np.dtype(draw(st.sampled_from(INT_TYPES + FLOAT_TYPES)))
    fmod = 1 if dtype.kind == "f" else draw(st.integers(0, 1))
    return shape, b_shape, dtype, fmod, draw(st.integers(0, 2**31))


def _operands(shape, b_shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        # a = (q + f) * b with f away from 0 and 1: a / b is never within rounding of an integer
        b = rng.uniform(0.5, 8, b_shape) * rng.choice([-1, 1], b_shape)
        a = (rng.integers(-50, 50, shape) + rng.uniform(0.02, 0.98, shape)) * b
        return a.astype(dtype), b.astype(dtype)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
    a = rng.integers(lo, hi, shape, dtype=dtype, endpoint=True)
    b = rng.integers(lo, hi, b_shape, dtype=dtype, endpoint=True)
    small = rng.integers(max(lo, -9), min(hi, 9), b_shape, dtype=dtype, endpoint=True)
    b = np.where(rng.random(b_shape) < 0.5, small, b)
    b = np.where(b == 0, np.ones((), dtype), b).astype(dtype)
    a = np.where(a == info.min, np.zeros((), dtype), a).astype(dtype) if info.min < 0 else a  # INT_MIN % -1 overflows
    return np.asarray(a, dtype), np.asarray(b, dtype)


def _check_random(shape, b_shape, dtype, fmod, seed):
    a, b = _operands(shape, b_shape, dtype, seed)
    m = _mod_model(shape, b_shape, dtype, fmod)
    tol = {np.dtype(np.float16): 2e-2, np.dtype(np.float32): 1e-3, np.dtype(np.float64): 1e-9}.get(dtype, 0)
    result = check_rewrite(m, "mod-decompose", {"a": a, "b": b}, atol=tol, rtol=0)
    assert "Mod" not in _ops(result.model)
    if dtype.kind != "f":
        want = np.fmod(a, b) if fmod else np.mod(a, b)
        np.testing.assert_array_equal(ort_run(result.model, {"a": a, "b": b})[0], want)
        np.testing.assert_array_equal(_session(result.model, optimized=False).run(None, {"a": a, "b": b})[0], want)
        np.testing.assert_array_equal(_floor_dividing(result.model, {"a": a, "b": b})[0], want)  # kFLOOR_DIV's reading


@settings(max_examples=40, deadline=None)
@given(mod_cases())
def test_random_mod_equals_onnxruntime(case):
    _check_random(*case)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(mod_cases())
def test_random_mod_equals_onnxruntime_slow(case):
    _check_random(*case)


# ------------------------------------------------------------------ one meaning for integer arithmetic
def _session(m: onnx.ModelProto, optimized: bool):
    import onnxruntime as ort

    from graphfix.onnxio.ir import runtime_compatible

    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(runtime_compatible(m).SerializeToString(), options, providers=["CPUExecutionProvider"])


def _floor_dividing(m: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """The model on the ONNX reference evaluator with integer Div flooring (TensorRT's kFLOOR_DIV,
    the ONNX reference before onnx/onnx#7570) instead of truncating (onnxruntime, kDIV)."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class Div(OpRun):
        op_domain = ""

        def _run(self, a, b):
            return (np.floor_divide(a, b) if a.dtype.kind in "iu" else np.divide(a, b).astype(a.dtype),)

    return ReferenceEvaluator(m, new_ops=[Div]).run(None, feeds)


def _one_over(divisor_dtype, fmod: int) -> onnx.ModelProto:
    """``1 % y`` with a runtime y: the numerator of the remainder's Div is the constant 1, the form
    onnxruntime's DivMulFusion rewrites (``Mul(y, Div(1, y)) -> Div(y, y)``)."""
    elem = ELEM[np.dtype(divisor_dtype)]
    return model([node("Constant", [], ["one"], value=onnx.numpy_helper.from_array(np.ones((1,), divisor_dtype))),
                  node("Mod", ["one", "y"], ["r"], fmod=fmod)], [inp("y", elem, ["N"])], [out("r", elem, ["N"])], opset=13)


def _old_integer_form(divisor_dtype) -> onnx.ModelProto:
    """The form mod-decompose wrote before: ``1 - y * Div(1, y)`` (C remainder, one Div feeding a Mul)."""
    elem = ELEM[np.dtype(divisor_dtype)]
    return model([node("Constant", [], ["one"], value=onnx.numpy_helper.from_array(np.ones((1,), divisor_dtype))),
                  node("Div", ["one", "y"], ["q"]), node("Mul", ["y", "q"], ["p"]), node("Sub", ["one", "p"], ["r"])],
                 [inp("y", elem, ["N"])], [out("r", elem, ["N"])], opset=13)


def test_old_integer_form_is_changed_by_divmul_fusion():
    """The hazard the new form avoids, shown on onnxruntime itself (if this stops failing, onnxruntime
    fixed DivMulFusion for integers; the new form stays right either way)."""
    y = np.array([2, 3, 7, -4], np.int64)
    old = _old_integer_form(np.int64)
    np.testing.assert_array_equal(_session(old, optimized=False).run(None, {"y": y})[0], np.fmod(1, y))
    assert not np.array_equal(_session(old, optimized=True).run(None, {"y": y})[0], np.fmod(1, y))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_remainder_immune_to_divmul_fusion(dtype, fmod):
    """Rewritten ``1 % y``: the same under onnxruntime's default optimizations, with them all off,
    and with a flooring integer Div, on divisors of both signs."""
    y = np.array([1, 2, 3, 7, 64, -1, -2, -5], dtype)
    result = passes.get("mod-decompose").apply(_one_over(dtype, fmod))
    assert result.rewritten == 1 and "Mod" not in _ops(result.model)
    want = np.fmod(np.ones_like(y), y) if fmod else np.mod(np.ones_like(y), y)
    for optimized in (True, False):
        np.testing.assert_array_equal(_session(result.model, optimized).run(None, {"y": y})[0], want)
    np.testing.assert_array_equal(_floor_dividing(result.model, {"y": y})[0], want)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("divisor", [None, 5, -5])
def test_integer_remainder_one_meaning_on_negative_operands(fmod, divisor):
    """Negative dividends and divisors (runtime or constant): truncating Div (onnxruntime, optimized
    or not) and flooring Div (reference evaluator with floor) give numpy's fmod / mod."""
    a = np.arange(-23, 24, dtype=np.int64).reshape(47, 1)
    if divisor is None:
        m, b = _mod_model([47, 1], [1, 6], np.int64, fmod), np.array([[1, -1, 4, -4, 9, -30]], np.int64)
        feeds = {"a": a, "b": b}
    else:
        m = model([node("Constant", [], ["b"], value=onnx.numpy_helper.from_array(np.array([divisor], np.int64))),
                   node("Mod", ["a", "b"], ["c"], fmod=fmod)], [inp("a", ELEM[np.dtype(np.int64)], [47, 1])],
                  [out("c", ELEM[np.dtype(np.int64)], [47, 1])], opset=13)
        b, feeds = np.array([divisor], np.int64), {"a": a}
    want = np.fmod(a, b) if fmod else np.mod(a, b)
    fixed = passes.get("mod-decompose").apply(m).model
    for optimized in (True, False):
        np.testing.assert_array_equal(_session(fixed, optimized).run(None, feeds)[0], want)
    np.testing.assert_array_equal(_floor_dividing(fixed, feeds)[0], want)
