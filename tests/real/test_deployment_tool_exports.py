"""Issue 32 on real deployment-tool outputs (fixtures/real/export_producers_ort.py): onnxruntime's
transformer optimizer and QOperator quantizer files lose every op no TensorRT release imports
under `--passes auto`, with parity, and a second run changes nothing."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import graphfix
from graphfix.check.findings import BLOCKING, check_model

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
OPTIMIZED = sorted(p.stem for p in REAL.glob("ortopt_*.onnx"))
QOPERATOR = sorted(p.stem for p in REAL.glob("ortquant_*_qop_*.onnx"))
RELEASES = ["8.5", "8.6", "10.1"]
#: What the optimizer and the QOperator quantizer write that no release imports.
LOWERED = {"EmbedLayerNormalization", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
           "SimplifiedLayerNormalization", "Attention", "MultiHeadAttention", "BiasGelu", "FastGelu", "QuickGelu",
           "RotaryEmbedding", "QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "QLinearSigmoid",
           "QLinearSoftmax", "QGemm"}


def _ops(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


def test_the_optimizer_and_quantizer_outputs_are_there():
    assert len(OPTIMIZED) >= 8 and len(QOPERATOR) >= 5


@pytest.mark.parametrize("name", OPTIMIZED + QOPERATOR)
def test_auto_lowers_every_contrib_and_qoperator_op_with_parity(name):
    model = onnx.load(str(REAL / f"{name}.onnx"))
    assert _ops(model) & LOWERED
    for trt in RELEASES:
        result = graphfix.fix(model, "auto", trt=trt)
        if "u8u8" in name or "u8s8" in name:  # asymmetric UINT8 activations: Q/DQ would still be refused
            assert result.report.status == "blocked", trt
            assert any("symmetric" in f["upstream"] for f in result.report.blocking_left), trt  # the remedy
            continue
        assert not _ops(result.model) & LOWERED, (trt, _ops(result.model) & LOWERED)
        assert all(n.domain in ("", "ai.onnx") for n in result.model.graph.node), trt
        assert not [p.name for p in result.report.passes if p.rolled_back_nodes or p.verdict in ("rolled-back", "error")], trt
        assert result.report.final, trt  # compared end to end
        left = [f for f in check_model(result.model, trt).findings if f.severity == BLOCKING]
        assert left == [], (trt, [(f.op, f.message) for f in left][:4])
        again = graphfix.fix(result.model, "auto", trt=trt, verify=False)
        assert [p.name for p in again.report.passes if p.rewritten] == [], trt
