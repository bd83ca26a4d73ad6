"""--simplify: onnxsim as a verified step, rolled back when it writes what the target rejects."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest

import graphfix
from graphfix.errors import GraphfixError

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
pytest.importorskip("onnxsim")


def test_simplified_model_is_verified_and_kept():
    plain = graphfix.fix(str(REAL / "swin_dynamic_hw.onnx"), "auto", trt="8.5", verify=False)
    result = graphfix.fix(str(REAL / "swin_dynamic_hw.onnx"), "auto", trt="8.5", simplify=True)
    step = result.report.passes[0]
    assert step.name == "simplify" and step.verdict == "kept"
    assert all(d["passed"] for d in step.outputs.values()) and step.outputs
    assert len(result.model.graph.node) < len(plain.model.graph.node) // 2
    assert result.report.status == "ok"


def test_contrib_ops_onnxsim_fuses_are_rolled_back():
    """onnxsim fuses the SuperGlue export's attention into com.microsoft::Attention: no parser imports it."""
    result = graphfix.fix(str(REAL / "superglue_sinkhorn_argmax.onnx"), "auto", trt="8.5", simplify=True)
    step = result.report.passes[0]
    assert step.name == "simplify" and step.verdict == "rolled-back" and "contrib Attention" in step.reason
    assert all(n.domain in ("", "ai.onnx") for n in result.model.graph.node)
    assert not result.report.blocking_left


def test_missing_onnxsim_is_one_clear_error(monkeypatch):
    real_import = builtins.__import__

    def no_onnxsim(name, *args, **kw):
        if name == "onnxsim":
            raise ImportError("No module named 'onnxsim'")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_onnxsim)
    with pytest.raises(GraphfixError, match=r"graphfix\[simplify\]"):
        graphfix.fix(str(REAL / "gpt_cumsum_positions.onnx"), "all", simplify=True, verify=False)
