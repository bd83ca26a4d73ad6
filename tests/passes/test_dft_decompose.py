"""dft-decompose: fixtures, ONNX DFT node cases, random axes/lengths/dft_length/inverse/onesided against numpy's FFT."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.onnxio.ir import runtime_compatible
from graphfix.trt import support
from graphfix.verify.inputs import make_inputs
from tests.helpers.support import frozen_case_runs, node_cases, ort_run, remaining_matches

NAME = "dft-decompose"
FIXTURES = [fx for group, fx in all_fixtures() if group == "dft_decompose"]


def _rewrite(m: onnx.ModelProto) -> onnx.ModelProto:
    result = passes.get(NAME).apply(m)
    assert result.rewritten >= 1, result.findings
    assert remaining_matches(result.model, NAME) == [] and "DFT" not in {n.op_type for n in result.model.graph.node}
    onnx.checker.check_model(runtime_compatible(result.model), full_check=True)
    return result.model


def _dft(x: np.ndarray, axis: int, length: int | None, inverse: bool, onesided: bool) -> np.ndarray:
    """numpy's float64 FFT in ONNX's real/imaginary layout."""
    signal = x[..., 0].astype(np.float64) + (1j * x[..., 1].astype(np.float64) if x.shape[-1] == 2 else 0)
    if inverse and onesided:
        return np.fft.irfft(signal, n=length, axis=axis)[..., None]
    y = (np.fft.ifft if inverse else np.fft.fft)(signal, n=length, axis=axis)
    if onesided:
        y = np.take(y, np.arange(y.shape[axis] // 2 + 1), axis=axis)
    return np.stack([y.real, y.imag], -1)


def _close(got: np.ndarray, want: np.ndarray, terms: int) -> None:
    scale = float(np.abs(want).max()) + 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.sqrt(terms) * np.finfo(np.float32).eps * scale)


def _dft_model(shape, axis, length, inverse, onesided, opset):
    names, inits, attrs = ["x", "n" if length is not None else ""], [], {"inverse": inverse, "onesided": onesided}
    if length is not None:
        inits.append(init("n", length, np.int64))
    if opset >= 20:
        names.append("axis")
        inits.append(init("axis", axis, np.int64))
    else:
        attrs["axis"] = axis
    while not names[-1]:
        names.pop()
    return model([node("DFT", names, ["y"], name="/DFT", **attrs)], [inp("x", FLOAT, shape)],
                 [out("y", FLOAT, ["d"] * len(shape))], inits, opset=opset)


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    m = fx.build()
    assert remaining_matches(m, NAME), "the fixture must reproduce the pattern"
    fixed = _rewrite(m)
    assert "MatMul" in {n.op_type for n in fixed.graph.node}
    feeds = make_inputs(m, fx.input_shapes, fx.val_range, seed=1)[0]
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(m).run(None, feeds)
    for g, w in zip(ort_run(fixed, feeds), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * (float(np.abs(w).max()) + 1))
    for version in ("8.2", "8.5", "8.6", "10.1", "11.1"):
        blocking = [f for f in check_model(fixed, version).findings if f.severity == "blocking"]
        assert blocking == [], (version, blocking)


@pytest.mark.parametrize("version", [v for v in support.versions() if "-" not in v])
def test_every_release_needs_it(version):
    m = FIXTURES[0].build()
    assert any(f.op == "DFT" and f.fix_pass == NAME for f in check_model(m, version).findings)
    assert passes.get(NAME).apply(m, trt=version).rewritten == 1


def test_findings():
    p = passes.get(NAME)
    dynamic = _dft_model([2, "n", 1], 1, None, 0, 0, 17)
    assert "static length" in p.apply(dynamic).findings[0].message
    axis_input = model([node("DFT", ["x", "", "axis"], ["y"])], [inp("x", FLOAT, [2, 8, 1]), inp("axis", INT64, [])],
                       [out("y", FLOAT, [2, 8, 2])], opset=20)
    assert "axis must be a constant" in p.apply(axis_input).findings[0].message
    past_nyquist = _dft_model([2, 7, 2], 1, 6, 1, 1, 20)
    assert "past the Nyquist" in p.apply(past_nyquist).findings[0].message
    huge = _dft_model([1, 5000, 2], 1, None, 0, 0, 17)
    assert "basis would have" in p.apply(huge).findings[0].message


@pytest.mark.parametrize("case", node_cases("DFT"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    for m, feeds, expected in frozen_case_runs(case, 17, "x"):
        got = ort_run(_rewrite(m), feeds)[0]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * float(np.abs(expected).max()))


# ------------------------------------------------------------------ random transforms
@st.composite
def dfts(draw):
    rank = draw(st.integers(2, 4))
    dims = draw(st.lists(st.integers(1, 9), min_size=rank - 1, max_size=rank - 1))
    axis = draw(st.integers(0, rank - 2))
    inverse, onesided = draw(st.booleans()), draw(st.booleans())
    channels = 2 if inverse and onesided else draw(st.sampled_from([1, 2]))
    n = dims[axis]
    length = draw(st.one_of(st.none(), st.integers(1, 14)))
    if inverse and onesided:
        length = length if length is not None else 2 * (n - 1)
        if length < 1 or n > length // 2 + 1:
            length = 2 * n  # one answer only up to the Nyquist bin (see the pass's findings)
    opset = draw(st.sampled_from([17, 20]))
    if onesided and not inverse:
        channels = 1  # ONNX's shape inference refuses a one-sided forward DFT of a complex input
    return {"shape": [*dims, channels], "axis": axis - (rank if draw(st.booleans()) else 0), "length": length,
            "inverse": int(inverse), "onesided": int(onesided), "opset": opset, "seed": draw(st.integers(0, 2**16))}


def _check_dft(d):
    m = _dft_model(d["shape"], d["axis"], d["length"], d["inverse"], d["onesided"], d["opset"])
    x = np.random.default_rng(d["seed"]).uniform(-1, 1, d["shape"]).astype(np.float32)
    got = ort_run(_rewrite(m), {"x": x})[0]
    axis = d["axis"] % len(d["shape"])
    _close(got, _dft(x, axis, d["length"], bool(d["inverse"]), bool(d["onesided"])), d["shape"][axis] * 2)


@settings(max_examples=60, deadline=None)
@given(d=dfts())
def test_random_dft(d):
    _check_dft(d)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(d=dfts())
def test_random_dft_slow(d):
    _check_dft(d)


def test_onnxruntime_is_the_reference_only_for_power_of_two_lengths():
    """onnxruntime's DFT is exact to rounding for 2^k points only; the length comes from dft_length
    or, without it, from the declared shape of the transformed axis (opset 17 attribute, 20 input)."""
    from graphfix.verify import sessions

    if sessions._onnxruntime_dft_length_ok():
        pytest.skip("the installed onnxruntime's DFT is exact at any length")
    assert not sessions._wrong_in_onnxruntime(_dft_model([2, 8, 3, 1], 1, None, 0, 0, 17))
    assert not sessions._wrong_in_onnxruntime(_dft_model([2, 6, 16, 1], 2, None, 0, 0, 20))
    assert not sessions._wrong_in_onnxruntime(_dft_model([2, 6, 3, 1], 1, 32, 0, 0, 17))
    assert sessions._wrong_in_onnxruntime(_dft_model([2, 6, 3, 1], 1, None, 0, 0, 17))
    assert sessions._wrong_in_onnxruntime(_dft_model([2, 8, 3, 1], 1, 12, 0, 0, 20))
    assert sessions._wrong_in_onnxruntime(_dft_model([2, 5, 3, 2], 1, None, 1, 1, 20))  # irfft: 2 * (bins - 1)
