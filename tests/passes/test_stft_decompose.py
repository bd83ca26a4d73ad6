"""stft-decompose: fixtures, ONNX STFT node cases, random signals/frames/steps/windows against a float64 FFT."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphfix
from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import DOUBLE, FLOAT, FLOAT16, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.onnxio.ir import runtime_compatible
from graphfix.verify import sessions
from graphfix.verify.inputs import make_inputs
from tests.helpers.support import frozen_case_runs, node_cases, ort_run, remaining_matches

NAME = "stft-decompose"
FIXTURES = [fx for group, fx in all_fixtures() if group == "stft_decompose"]


def _ops(m: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in m.graph.node}


def _rewrite(m: onnx.ModelProto) -> onnx.ModelProto:
    result = passes.get(NAME).apply(m)
    assert result.rewritten >= 1, result.findings
    assert remaining_matches(result.model, NAME) == [] and "STFT" not in _ops(result.model)
    onnx.checker.check_model(runtime_compatible(result.model), full_check=True)
    return result.model


def _stft(x: np.ndarray, step: int, length: int, window: np.ndarray | None, onesided: bool) -> np.ndarray:
    """STFT by numpy's float64 FFT: [B, L, 1|2] -> [B, frames, bins, 2]."""
    signal = x[..., 0].astype(np.float64) + (1j * x[..., 1].astype(np.float64) if x.shape[-1] == 2 else 0)
    frames = np.lib.stride_tricks.sliding_window_view(signal, length, axis=1)[:, ::step]
    if window is not None:
        frames = frames * window.astype(np.float64)
    spec = np.fft.fft(frames, axis=-1)[..., : length // 2 + 1 if onesided else length]
    return np.stack([spec.real, spec.imag], -1)


def _close(got: np.ndarray, want: np.ndarray, length: int) -> None:
    """Float rounding of one dot product of ``length`` terms: a few ulps of the largest magnitude."""
    scale = float(np.abs(want).max()) + 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.sqrt(length) * np.finfo(np.float32).eps * scale)


def _stft_model(channels: int, length: int, step: int, window: str, onesided: int, signal_len: int | str,
                frame_length: bool = True, dtype: int = FLOAT) -> onnx.ModelProto:
    inputs = [inp("signal", dtype, ["batch", signal_len, channels])]
    inits = [init("frame_step", step, np.int64)]
    names = ["signal", "frame_step", "", "frame_length" if frame_length else ""]
    if window == "constant":
        np_dtype = {FLOAT: np.float32, FLOAT16: np.float16, DOUBLE: np.float64}[dtype]
        inits.append(init("window", np.hamming(length + 1)[:length].astype(np_dtype)))
        names[2] = "window"
    elif window == "input":
        inputs.append(inp("window", dtype, [length]))
        names[2] = "window"
    if frame_length:
        inits.append(init("frame_length", length, np.int64))
    while not names[-1]:
        names.pop()
    return model([node("STFT", names, ["y"], name="/STFT", onesided=onesided)], inputs, [out("y", dtype, ["batch", "frames", "bins", 2])], inits)


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    m = fx.build()
    assert remaining_matches(m, NAME), "the fixture must reproduce the pattern"
    fixed = _rewrite(m)
    assert "Conv" in _ops(fixed)
    feeds = make_inputs(m, fx.input_shapes, fx.val_range, seed=1)[0]
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(m).run(None, feeds)  # numpy's float64 FFT, rounded once
    got = ort_run(fixed, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * (float(np.abs(w).max()) + 1))
    for version in ("8.2", "8.5", "8.6", "10.1", "10.6"):
        blocking = [f for f in check_model(fixed, version).findings if f.severity == "blocking"]
        assert blocking == [], (version, blocking)


def test_frame_count_follows_the_signal_length():
    """One rewritten model for every length: the strided Conv's output length is the frame count."""
    fixed = _rewrite(_stft_model(1, 12, 5, "constant", 1, "samples"))
    window = np.hamming(13)[:12]
    for n in (12, 13, 16, 17, 40, 101):
        x = np.random.default_rng(n).standard_normal((2, n, 1)).astype(np.float32)
        got = ort_run(fixed, {"signal": x})[0]
        assert got.shape == (2, (n - 12) // 5 + 1, 7, 2)
        _close(got, _stft(x, 5, 12, window, True), 12)


@pytest.mark.parametrize("window", ["none", "constant", "input"])
@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("channels", [1, 2])
def test_power_of_two_frames_equal_onnxruntime(window, onesided, channels):
    """Where onnxruntime runs its radix-2 FFT it is exact to rounding too: the two agree to a few ulps."""
    m = _stft_model(channels, 16, 4, window, onesided, 64)
    rng = np.random.default_rng(7)
    feeds = {"signal": rng.standard_normal((2, 64, channels)).astype(np.float32)}
    if window == "input":
        feeds["window"] = rng.uniform(0, 1, 16).astype(np.float32)
    want, got = ort_run(m, feeds)[0], ort_run(_rewrite(m), feeds)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=16 * np.finfo(np.float32).eps * float(np.abs(want).max()))


def test_whisper_frames_kept_by_verification():
    """n_fft 400 (Whisper): onnxruntime's own STFT is ~1e-3 off there, so verification computes the
    original with the reference evaluator and keeps the exact rewrite instead of rolling it back."""
    m = _stft_model(1, 400, 160, "constant", 1, 1200)
    assert sessions._wrong_in_onnxruntime(m) == (not sessions._onnxruntime_dft_length_ok())
    result = graphfix.fix(m, "auto", trt="8.5", input_shapes={"signal": (1, 1200, 1)})
    assert result.report.passes[0].verdict == "kept", result.report.passes[0].reason
    x = np.random.default_rng(3).standard_normal((1, 1200, 1)).astype(np.float32)
    _close(ort_run(result.model, {"signal": x})[0], _stft(x, 160, 400, np.hamming(401)[:400], True), 400)
    power_of_two = _stft_model(1, 512, 160, "constant", 1, 1200)
    assert not sessions._wrong_in_onnxruntime(power_of_two)


@pytest.mark.parametrize("length", [1000, 1024])
def test_long_frames_as_the_output_kept(length):
    """The STFT itself as the model's output, frames of 1000/1024 samples: float32 dot products of
    that length round by ~2e-5 against either reference, above the strict 1e-5, within the original
    model's own noise floor (its outputs moved by one-ulp inputs; measured on the reference
    evaluator where that is the reference, and on the stub's weights, which hold frame_length)."""
    m = _stft_model(1, length, length // 4, "constant", 1, 16000)
    result = graphfix.fix(m, NAME, input_shapes={"signal": (1, 16000, 1)})
    assert result.report.passes[0].verdict == "kept", result.report.passes[0].reason


def test_version_boundaries():
    """No importer before 10.6; from 10.6 only a run-time window/step or a complex/non-FP32 signal."""
    by_name = {fx.name: fx.build() for fx in FIXTURES}
    for version in ("7.2", "8.2", "8.6", "10.1"):
        for name, m in by_name.items():
            assert any(f.op == "STFT" and f.fix_pass == NAME for f in check_model(m, version).findings), (version, name)
    for version in ("10.6", "11.1"):
        flagged = {name for name, m in by_name.items() if any(f.op == "STFT" for f in check_model(m, version).findings)}
        assert flagged == {"complex_two_sided", "window_from_hann_op", "window_input"}, version


def test_findings():
    p = passes.get(NAME)
    step_input = model([node("STFT", ["signal", "step", "window"], ["y"])],
                       [inp("signal", FLOAT, [1, 64, 1]), inp("step", INT64, [])], [out("y", FLOAT, [1, "frames", "bins", 2])],
                       [init("window", np.ones(8, np.float32))])
    assert "frame_step must be a constant" in p.apply(step_input).findings[0].message
    unknown = model([node("STFT", ["signal", "step", "window"], ["y"])], [inp("signal", FLOAT, [1, 64, "c"])],
                    [out("y", FLOAT, [1, "frames", "bins", 2])], [init("step", 4, np.int64), init("window", np.ones(8, np.float32))])
    assert "[batch, length, 1]" in p.apply(unknown).findings[0].message
    double = _stft_model(1, 8, 4, "constant", 1, 64, dtype=DOUBLE)
    assert "float32/float16 only" in p.apply(double).findings[0].message
    huge = _stft_model(1, 8192, 4, "none", 0, 9000)
    assert "basis would have" in p.apply(huge).findings[0].message


def test_float16_signal():
    m = _stft_model(1, 16, 4, "constant", 1, 64, dtype=FLOAT16)
    x = np.random.default_rng(0).standard_normal((1, 64, 1)).astype(np.float16)
    got = ort_run(_rewrite(m), {"signal": x})[0]
    assert got.dtype == np.float16
    want = _stft(x, 4, 16, np.hamming(17)[:16].astype(np.float16), True)
    np.testing.assert_allclose(got.astype(np.float64), want, atol=4e-3 * (np.abs(want).max() + 1))


@pytest.mark.parametrize("case", node_cases("STFT"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    for m, feeds, expected in frozen_case_runs(case, 17, "signal"):
        got = ort_run(_rewrite(m), feeds)[0]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * float(np.abs(expected).max()))


# ------------------------------------------------------------------ random frames
@st.composite
def stfts(draw):
    length = draw(st.integers(1, 40))
    return {"channels": draw(st.sampled_from([1, 2])), "length": length, "step": draw(st.integers(1, 12)),
            "window": draw(st.sampled_from(["none", "constant", "input"])), "onesided": draw(st.sampled_from([0, 1])),
            "signal": length + draw(st.integers(0, 50)), "batch": draw(st.integers(1, 3)),
            "frame_length": draw(st.booleans()), "seed": draw(st.integers(0, 2**16))}


def _check_stft(s):
    frame_length = s["frame_length"] or s["window"] == "none"
    m = _stft_model(s["channels"], s["length"], s["step"], s["window"], s["onesided"], "samples", frame_length)
    fixed = _rewrite(m)
    rng = np.random.default_rng(s["seed"])
    feeds = {"signal": rng.uniform(-1, 1, (s["batch"], s["signal"], s["channels"])).astype(np.float32)}
    window = {"none": None, "constant": np.hamming(s["length"] + 1)[: s["length"]].astype(np.float32)}.get(s["window"])
    if s["window"] == "input":
        window = feeds["window"] = rng.uniform(-1, 1, s["length"]).astype(np.float32)
    got = ort_run(fixed, feeds)[0]
    _close(got, _stft(feeds["signal"], s["step"], s["length"], window, bool(s["onesided"])), s["length"])


@settings(max_examples=60, deadline=None)
@given(s=stfts())
def test_random_stft(s):
    _check_stft(s)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(s=stfts())
def test_random_stft_slow(s):
    _check_stft(s)
