"""Real opset-23 exports of a tiny transformers Llama (fixtures/real/export_real_newops.py): the
operators of issue 25 that graphfix rewrites are gone at the Jetson/server releases, verified.

Both files also hold one Attention node (SDPA), which attention-decompose (another branch) is
about: these tests only assert about RMSNormalization and RotaryEmbedding."""

from __future__ import annotations

from pathlib import Path

import pytest

import graphfix

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
MINE = {"RMSNormalization", "RotaryEmbedding", "TensorScatter", "Swish", "SwiGLU", "CumProd"}
EXPECTED = {"llama_rmsnorm_opset23": {"rmsnorm-decompose": 3},
            "llama_rotary_op_opset23": {"rmsnorm-decompose": 3, "rotary-embedding-decompose": 2}}


@pytest.mark.parametrize("trt", ["8.6", "10.1", "10.7"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rmsnorm_and_rotary_rewritten_and_verified(name, trt):
    result = graphfix.fix(str(REAL / f"{name}.onnx"), "auto", trt=trt)
    kept = {p.name: p.rewritten for p in result.report.passes if p.verdict == "kept"}
    assert {k: kept.get(k) for k in EXPECTED[name]} == EXPECTED[name], [(p.name, p.verdict, p.reason) for p in result.report.passes]
    assert not MINE & {n.op_type for n in result.model.graph.node}
    left = [f for f in result.report.trt["after"]["findings"] if f["severity"] == "blocking"]
    assert {f["op"] for f in left} <= {"Attention"}, left


def test_at_10_15_nothing_of_ours_is_rewritten():
    result = graphfix.fix(str(REAL / "llama_rotary_op_opset23.onnx"), "auto", trt="10.15")
    assert {"RMSNormalization", "RotaryEmbedding"} <= {n.op_type for n in result.model.graph.node}
