"""--requantize-symmetric and --dequantize-dynamic on onnxruntime's quantizer outputs (fixtures/real/
ortquant_*): each rewrites only when asked, its table line and note give the deviation, and the model
the target then accepts is written (exit 0)."""

from __future__ import annotations

import contextlib
import io
import json
import resource
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from graphfix.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "fixtures" / "real"
MEMORY = 6 << 30  # models we did not write: capped


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _fix(src: str, dst: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphfix", "fix", str(REAL / src), str(dst), "--passes", "auto", "--trt", "10.1",
                           "--report", str(dst.with_suffix(".json")), *options],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=_cap)


def _record(dst: Path, name: str) -> dict:
    return next(p for p in json.loads(dst.with_suffix(".json").read_text())["passes"] if p["name"] == name)


@pytest.mark.parametrize("src", ["ortquant_mlp_qdq_u8u8_asym.onnx", "ortquant_cnn_qdq_u8u8_asym.onnx", "ortquant_mlp_qop_u8u8.onnx",
                                 "ortquant_cnn_qop_u8u8.onnx"])
def test_requantize_symmetric_makes_asymmetric_quantization_symmetric_and_says_by_how_many_steps(src, tmp_path):
    dst = tmp_path / "out.onnx"
    done = _fix(src, dst, "--requantize-symmetric")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "requantize-symmetric: not exact (opt-in): outputs moved by up to" in done.stdout
    record = _record(dst, "requantize-symmetric")
    assert record["verdict"] == "kept" and all(0 <= o["steps"] <= 8 for o in record["outputs"].values())
    model = onnx.load(str(dst))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    zeros = [inits[n.input[2]] for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2]
    assert zeros and all(not z.any() and z.dtype.name in ("int8", "int32") for z in zeros)


def test_without_the_option_asymmetric_zero_points_stay_and_a_pass_list_cannot_name_it(tmp_path):
    dst = tmp_path / "out.onnx"
    done = _fix("ortquant_mlp_qdq_u8u8_asym.onnx", dst)
    assert all(p["name"] != "requantize-symmetric" for p in json.loads(dst.with_suffix(".json").read_text())["passes"])
    # TensorRT refuses the asymmetric zero points: exit 4, the exact remedy and the opt-in both named
    assert done.returncode == 4 and "ActivationSymmetric" in done.stdout
    assert "clear with an opt-in rewrite that changes results: --requantize-symmetric" in done.stdout + done.stderr
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(dst)).graph.initializer}
    assert any(v.dtype.name == "uint8" and v.any() for v in inits.values())
    listed = subprocess.run([sys.executable, "-m", "graphfix", "fix", str(REAL / "ortquant_mlp_qdq_u8u8_asym.onnx"),
                             str(tmp_path / "listed.onnx"), "--passes", "qdq-uint8-to-int8,requantize-symmetric"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=_cap)
    assert listed.returncode == 2 and "runs only with --requantize-symmetric" in listed.stderr
    assert not (tmp_path / "listed.onnx").exists()


@pytest.mark.parametrize("src", ["ortquant_lstm_dynamic_s8.onnx", "ortquant_cnn_dynamic_s8.onnx", "ortquant_bert_dynamic_u8.onnx"])
def test_dequantize_dynamic_writes_a_float_model_the_target_accepts_and_says_so(src, tmp_path):
    dst = tmp_path / "out.onnx"
    plain = _fix(src, tmp_path / "plain.onnx")
    assert plain.returncode == 4  # dynamic quantization: no importer; the opt-in is named as the remedy
    assert "clear with an opt-in rewrite that changes results: --dequantize-dynamic" in plain.stdout + plain.stderr
    done = _fix(src, dst, "--dequantize-dynamic")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "no longer quantized" in done.stdout and "% of its peak magnitude" in done.stdout
    assert _record(dst, "dequantize-dynamic")["verdict"] == "kept"
    ops = {n.op_type for n in onnx.load(str(dst)).graph.node}
    assert not ops & {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM", "DequantizeLinear"}


def test_the_pass_listing_shows_the_opt_in_rewrites_apart_with_their_option():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["passes", "--json"]) == 0
    listing = json.loads(buffer.getvalue())
    opt_in = [r for r in listing if r.get("option")]
    assert [r["name"] for r in opt_in] == ["dequantize-dynamic", "requantize-symmetric"]
    assert all(r["exact"] is False and r["order"] is None for r in opt_in)
    assert all(r.get("exact", True) for r in listing if not r.get("option"))
