"""Verification's cost is paid only for what was rewritten: a run whose passes change nothing
opens no onnxruntime session (no shape search, no probe, no noise floor) and writes the model."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnxruntime
import pytest

import graphfix
from fixtures.recipes import fold_clip, mod_decompose
from fixtures.recipes._onnx import FLOAT, const, inp, model, node, out
from graphfix.cli.main import main
from graphfix.runtime import worker as runtime_worker
from tests.helpers.models import many_outputs


def _unrunnable_anywhere():
    """Dynamic [N, L] reshaped to a fixed [7, 13]: onnxruntime runs it only where N*L = 91, which
    no candidate shape gives, so a shape search would end in 'cannot run at any candidate shape'.
    Nothing in it is for any pass to rewrite."""
    return model(
        [const("target", np.array([7, 13], np.int64)), node("Reshape", ["x", "target"], ["r"], name="/Reshape"),
         node("Relu", ["r"], ["y"], name="/Relu")],
        [inp("x", FLOAT, ["N", "L"])], [out("y", FLOAT, [7, 13])], opset=17)


@pytest.fixture
def no_sessions(monkeypatch):
    """Every onnxruntime session made during the test, here or in graphfix's worker process,
    counted (and refused). What the installed
    onnxruntime reads (IR version, opsets) is asked first: a one-off capability query of a 1-node
    model, cached for the process, which writing any model needs; it is not verification."""
    from graphfix.onnxio.ir import runtime_limits

    runtime_limits()
    made = []

    def refuse(*args, **kwargs):
        made.append(args)
        raise AssertionError("an onnxruntime session was opened")

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse)
    monkeypatch.setattr(runtime_worker, "open_session", refuse)  # sessions in graphfix's worker process
    return made


@pytest.mark.parametrize("verify_each", [False, True])
def test_nothing_rewritten_opens_no_session(no_sessions, verify_each):
    result = graphfix.fix(_unrunnable_anywhere(), "all", verify_each=verify_each)
    assert no_sessions == [] and result.report.sessions == 0 and result.report.search_sessions == 0
    assert all(p.verdict == "unchanged" for p in result.report.passes)
    assert "nothing was rewritten" in result.report.shapes["reason"] and "none needed" in result.report.verification
    assert result.outcome.baseline is None and result.outcome.feeds == []


def test_model_with_nothing_to_rewrite_is_written_with_exit_0(no_sessions, tmp_path):
    src, dst, rep = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    import onnx

    onnx.save(_unrunnable_anywhere(), src)
    assert main([str(src), str(dst), "--report", str(rep), "--quiet"]) == 0
    assert dst.exists() and no_sessions == []
    assert json.loads(rep.read_text())["sessions"] == 0


def test_findings_left_unrewritten_exit_4_without_a_session(no_sessions, tmp_path):
    """--trt 8.0 rejects Mod; with mod-decompose skipped nothing is rewritten: the model is
    written, the blocking findings are listed (exit 4), and no session was opened."""
    import onnx

    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(mod_decompose.int_remainder_dynamo(), src)
    assert main([str(src), str(dst), "--passes", "auto", "--trt", "8.0", "--skip", "mod-decompose", "--quiet"]) == 4
    assert dst.exists() and no_sessions == []


def test_a_rewrite_still_pays_for_verification():
    """The other side: when something was rewritten, the shape search and the sessions happen."""
    result = graphfix.fix(fold_clip.clip_cast_bounds(), "fold-clip")
    assert result.report.passes[0].verdict == "kept" and result.report.sessions >= 2
    assert result.outcome.baseline is not None and result.outcome.feeds


def _python_calls(run) -> int:
    """Python function calls made in this process while ``run()`` runs (the worker's are its own)."""
    calls = 0

    def count(frame, event, arg):  # noqa: ARG001 - sys.setprofile's signature
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


#: Python calls verification may make per output of the model: about 145 now; polygraphy's
#: comparison and its IterationResult made 13,700 (a model with 8000 outputs took minutes).
CALLS_PER_OUTPUT = 1000


def test_each_output_costs_a_bounded_amount_of_python_work():
    """Linear in the number of outputs with a small constant: every output is compared in plain
    numpy, not through polygraphy's formatting and logging comparator."""
    graphfix.fix(many_outputs(5), "fold-clip")  # the worker started, onnxruntime imported
    calls = {n: _python_calls(lambda n=n: graphfix.fix(many_outputs(n), "fold-clip")) for n in (40, 160)}
    per_output = (calls[160] - calls[40]) / 120
    assert per_output < CALLS_PER_OUTPUT, calls
