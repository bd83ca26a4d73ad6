"""optimum's merged decoder (fixtures/real/optimum_whisper_decoder_merged.onnx) with its flag frozen:
`--set-input use_cache_branch=1` (or 0) inlines the one If on it, at 8.5 and 10.1, and the written
model gives the original's results fed that flag. The with-past branch returns [0, 2, 1, 16]
placeholder initializers named like the If's outputs ('present.0.encoder.key'): before, the
inlined graph held two tensors of that name and the step was rolled back ("not SSA"), leaving the
If that check warns about (if-branch-dims-runtime) for TensorRT."""

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

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "fixtures" / "real" / "optimum_whisper_decoder_merged.onnx"
MEMORY = 6 << 30  # a model we did not write (optimum did): capped


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _feeds(past: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return {"input_ids": rng.integers(0, 50, (2, 3), dtype=np.int64),
            "encoder_hidden_states": rng.standard_normal((2, 5, 32)).astype(f32),
            "past_key_values.0.decoder.key": rng.standard_normal((2, 2, past, 16)).astype(f32),
            "past_key_values.0.decoder.value": rng.standard_normal((2, 2, past, 16)).astype(f32),
            "past_key_values.0.encoder.key": rng.standard_normal((2, 2, 5, 16)).astype(f32),
            "past_key_values.0.encoder.value": rng.standard_normal((2, 2, 5, 16)).astype(f32)}


def _run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("trt", ["8.5", "10.1"])
@pytest.mark.parametrize("flag", [1, 0])
def test_a_frozen_cache_flag_inlines_the_merged_decoders_if(trt, flag, tmp_path):
    dst = tmp_path / "out.onnx"
    done = subprocess.run([sys.executable, "-m", "graphfix", str(SOURCE), str(dst), "--passes", "auto", "--trt", trt,
                           "--set-input", f"use_cache_branch={flag}", "--report", str(tmp_path / "r.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=_cap)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    record = next(p for p in report["passes"] if p["name"] == "set-input")
    assert record["verdict"] == "kept" and report["status"] == "ok", record
    fixed = onnx.load(str(dst))
    onnx.checker.check_model(fixed, full_check=True)
    assert [n for n in all_nodes(fixed.graph) if n.op_type == "If"] == []
    assert "use_cache_branch" not in [i.name for i in fixed.graph.input]
    assert [f for f in check_model(fixed, trt).findings if f.severity == "blocking"] == []
    for past in (1, 4):
        feeds = _feeds(past)
        want = _run(SOURCE, {**feeds, "use_cache_branch": np.array([bool(flag)])})
        for got, expected in zip(_run(dst, feeds), want, strict=True):
            assert got.shape == expected.shape  # the with-past branch's [0, 2, 1, 16] placeholders too
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
