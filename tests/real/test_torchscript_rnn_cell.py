"""Issue 34's rank-switching recurrent cell (fixtures/real/torchscript_rnn_cell_sr_switch.onnx, a
scripted LSTMCell + one-step GRU per sample rate): with `--passes auto` at 8.5 and 10.1 every If a
static rank or dim decides is folded, nested in the sample-rate If and chained (the GRU's rank test
reads the LSTMCell's output), leaving only the sample-rate If, whose branches return the same
shapes; with `--set-input sr=...` no If is left. Each written model is compared with the original
(the report's end-to-end comparison, and here at both rates), and a second run changes nothing."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from graphfix.check.findings import check_model
from graphfix.onnxio.proto import all_nodes
from tests.helpers.control_flow import strictly_inferred

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "fixtures" / "real" / "torchscript_rnn_cell_sr_switch.onnx"
MEMORY = 6 << 30  # a model we did not write (the exporter did): capped
RELEASES = ["8.5", "10.1"]
RATES = [16000, 8000]


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _fix(src: Path, dst: Path, trt: str, *options: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = subprocess.run([sys.executable, "-m", "graphfix", "fix", str(src), str(dst), "--passes", "auto", "--trt", trt,
                           "--report", str(dst.with_suffix(".json")), *options],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=_cap)
    written = dst.with_suffix(".json")
    return done, json.loads(written.read_text()) if written.exists() else {}  # none: the run failed (its exit says)


def _ifs(model: onnx.ModelProto) -> int:
    return sum(n.op_type == "If" for n in all_nodes(model.graph))


def _feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, 64)).astype(np.float32),
            "h": (rng.standard_normal((1, 32)) * 0.5).astype(np.float32),
            "c": (rng.standard_normal((1, 32)) * 0.5).astype(np.float32)}


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_the_fixture_has_rank_ifs_nested_in_the_sample_rate_if():
    model = onnx.load(str(SOURCE))
    assert _ifs(model) == 19 and [n.op_type for n in model.graph.node].count("If") == 1
    assert [i.name for i in model.graph.input] == ["x", "h", "c", "sr"]


@pytest.mark.parametrize("trt", RELEASES)
def test_auto_folds_every_shape_decided_if_and_keeps_the_sample_rate_if(trt, tmp_path):
    """Before: if-inline was rolled back (a branch's untyped outputs counted as changed ends) and the
    chained cells' Ifs were never decided: exit 4, 12 blocking findings at either release."""
    dst = tmp_path / "out.onnx"
    done, report = _fix(SOURCE, dst, trt)
    assert done.returncode == 0 and report.get("status") == "ok", done.stdout + done.stderr
    assert all(o["passed"] for o in report["final"].values())  # the report's end-to-end comparison
    fixed = onnx.load(str(dst))
    assert _ifs(fixed) == 1  # 19 before: the sample-rate If stays, a runtime If TensorRT accepts
    (sr_if,) = [n for n in fixed.graph.node if n.op_type == "If"]
    ranks = [[len(o.type.tensor_type.shape.dim) for o in a.g.output] for a in sr_if.attribute]
    assert ranks[0] == ranks[1] == [2, 2, 2]
    assert check_model(fixed, trt).findings == []
    strictly_inferred(fixed)  # the typed branch outputs pass onnx's strict inference, as the input does
    for rate in RATES:
        for seed in (0, 1):
            feeds = _feeds(seed)
            want = _run(SOURCE, {**feeds, "sr": np.array(rate, np.int64)})
            for got, expected in zip(_run(dst, {**feeds, "sr": np.array(rate, np.int64)}), want, strict=True):
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    again_dst = tmp_path / "again.onnx"
    again, second = _fix(dst, again_dst, trt)
    assert again.returncode == 0 and [p["name"] for p in second["passes"] if p["rewritten"]] == []
    assert [n.op_type for n in all_nodes(onnx.load(str(again_dst)).graph)] == [n.op_type for n in all_nodes(fixed.graph)]


@pytest.mark.parametrize("trt", RELEASES)
@pytest.mark.parametrize("rate", RATES)
def test_a_frozen_sample_rate_leaves_no_if(trt, rate, tmp_path):
    """Before: an internal error (undoing if-inline inside the branch raised ValueError), exit 3."""
    dst = tmp_path / "out.onnx"
    done, report = _fix(SOURCE, dst, trt, "--set-input", f"sr={rate}")
    assert done.returncode == 0 and report.get("status") == "ok", done.stdout + done.stderr
    record = next(p for p in report["passes"] if p["name"] == "set-input")
    assert record["verdict"] == "kept" and all(o["passed"] for o in record["outputs"].values())  # vs the original fed sr
    fixed = onnx.load(str(dst))
    assert _ifs(fixed) == 0 and [i.name for i in fixed.graph.input] == ["x", "h", "c"]
    feeds = _feeds(2)
    for got, expected in zip(_run(dst, feeds), _run(SOURCE, {**feeds, "sr": np.array(rate, np.int64)}), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    again_dst = tmp_path / "again.onnx"
    again, second = _fix(dst, again_dst, trt)
    assert again.returncode == 0 and [p["name"] for p in second["passes"] if p["rewritten"]] == []
