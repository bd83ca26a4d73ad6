"""`check` on ops TensorRT's parser can only take as plugins: onnxruntime's contrib ops (ONNX
domain or com.microsoft) and other custom domains. Each is a no-importer finding that quotes the
parser's words for that op, cites the importer source, and names a pass only where one claims
the op's domain (issue 32's contrib lowerings do, for the ops they rewrite)."""

from __future__ import annotations

import dataclasses

import pytest
from onnx import TensorProto, helper

from graphfix import passes
from graphfix.analysis.fold import Folder
from graphfix.check.findings import check_model, passes_for
from graphfix.graph import Builder, to_graph
from graphfix.passes.base import NO_IMPORTER, Context, Rule
from tests.helpers.producers import unlowered_microsoft_model, unlowered_onnx_domain_model


def _plugin_findings(m, trt: str):
    return [f for f in check_model(m, trt).findings if f.error_id == "custom-domain-op-plugin-library-missing"]


@pytest.mark.parametrize("trt", ["8.5", "8.6", "10.1"])
def test_each_contrib_op_has_its_own_parser_message_and_evidence(trt):
    found = _plugin_findings(unlowered_microsoft_model(), trt) + _plugin_findings(unlowered_onnx_domain_model(), trt)
    assert [f.op for f in found] == ["Inverse", "Affine"]
    for f in found:
        assert f.severity == "blocking" and f.rule == NO_IMPORTER and f.fix_pass is None
        assert f.error_text.startswith(f"No importer registered for op: {f.op}. Attempting to import as plugin.")
        assert "grid_sampler" not in f.error_text and "Plugin not found" in f.error_text
        assert "ModelImporter.cpp" in f.evidence and "8.5-GA" in f.evidence and "10.1-GA" in f.evidence
        assert "no graphfix pass lowers it" in f.message and f.upstream


def _custom(op: str, domain: str = "com.microsoft"):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="n", domain=domain)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)], ir_version=8)


@pytest.mark.parametrize("op", ["LayerNormalization", "Attention", "RotaryEmbedding", "Trilu", "CumSum", "Pad"])
def test_onnx_namesakes_in_com_microsoft_are_not_claimed_by_onnx_op_passes(op):
    """com.microsoft::Attention and RotaryEmbedding take other inputs than the ONNX ops of those
    names: a pass that rewrites the ONNX op must not be offered (nor run) for them; only a lowering
    of onnxruntime's contrib ops (a pass whose domains name com.microsoft) may be."""
    m = _custom(op)
    lowerings = {p.name for p in passes.all_passes() if "com.microsoft" in p.domains}
    assert all(f.fix_pass in lowerings | {None} for f in check_model(m, "8.6").findings)
    g = to_graph(m)
    ctx = Context(g, Builder(g), Folder(g))
    assert not any(p.match(n, ctx) for p in passes.all_passes() for n in g.nodes if p.name not in lowerings)


def test_a_pass_that_claims_the_domain_is_named_as_the_fix(monkeypatch):
    """How a contrib-ops lowering plugs in: its ``domains`` and ``ops``; ``check`` and
    ``--passes auto`` then name and run it for those findings."""
    base = passes.get("gelu-decompose")
    lowering = dataclasses.replace(
        base, name="contrib-ops-test", ops=frozenset({"Inverse"}), domains=frozenset({"com.microsoft"}),
        rules=(Rule(NO_IMPORTER, "all", "onnxruntime contrib op", error="custom-domain-op-plugin-library-missing"),))
    real = passes.all_passes
    monkeypatch.setattr(passes, "all_passes", lambda: (*real(), lowering))
    report = check_model(unlowered_microsoft_model(), "8.6")
    fixes = {f.op: f.fix_pass for f in report.findings if f.rule == NO_IMPORTER}
    assert fixes == {"Inverse": "contrib-ops-test"}
    assert "contrib-ops-test" in passes_for(report)


@pytest.mark.parametrize("op,trt,severity", [("Gelu", "8.6", "blocking"), ("Gelu", "10.1", "warning"),
                                             ("LayerNormalization", "8.6", "warning"), ("FastGelu", "10.1", "blocking")])
def test_a_namesake_of_an_imported_onnx_op_is_imported_by_its_importer(op, trt, severity):
    """ModelImporter.cpp looks the importer up by op_type alone: com.microsoft::Gelu on 10.1 (which
    imports Gelu) is no plugin lookup, but the ONNX Gelu importer reading a contrib op (a warning)."""
    (f,) = check_model(_custom(op), trt).findings
    assert f.severity == severity
    assert (f.rule, "ignores the domain" in f.message) == (("wrong-results", True) if severity == "warning" else ("no-importer", False))
