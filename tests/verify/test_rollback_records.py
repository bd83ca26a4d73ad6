"""Every undone rewrite is in the report's node records like a kept one: which node, which pass,
why, and its before/after diagram, whether verification rolled it back (outputs differed) or the
target check undid it before verification (it emitted an op the ``--trt`` release rejects)."""

from __future__ import annotations

import json

import numpy as np
import onnx

import graphfix
from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from graphfix.graph import replace_tensor
from graphfix.passes import Pass
from graphfix.passes.base import LIMIT, Rule
from graphfix.report.html import page
from graphfix.report.model import KEPT, ROLLED_BACK


def _test_pass(name: str, ops: set[str], rewrite) -> Pass:
    return Pass(name, name, frozenset(ops), (Rule(LIMIT, "all", "test pattern", evidence="test"),), rewrite, doc="test")


def _two_relus() -> onnx.ModelProto:
    return model([node("Relu", ["x"], ["a"], name="/good/Relu"), node("Neg", ["x"], ["n"]),
                  node("Relu", ["n"], ["b"], name="/bad/Relu"), node("Add", ["a", "b"], ["y"])],
                 [inp("x", FLOAT, [3, 4])], [out("y", FLOAT, [3, 4])])


def _wrong_for_bad(n, ctx):
    """/good/Relu -> Max(x, 0) (right); /bad/Relu -> Abs (wrong: verification rolls it back)."""
    x = n.inputs[0]
    new = ctx.builder.op("Abs", [x]) if "bad" in n.name else ctx.builder.op("Max", [x, np.array(0, np.float32)])
    replace_tensor(ctx.graph, n.outputs[0], new)


def _einsum_for_bad(n, ctx):
    """/bad/Relu -> Einsum (TensorRT 8.0 has no importer: the target check undoes it before
    verification would see that it is not a Relu)."""
    x = n.inputs[0]
    new = (ctx.builder.op("Einsum", [x], {"equation": "ij->ij"}) if "bad" in n.name
           else ctx.builder.op("Max", [x, np.array(0, np.float32)]))
    replace_tensor(ctx.graph, n.outputs[0], new)


def _records(result) -> dict[str, dict]:
    return {r["nodes"][0]: r for r in json.loads(json.dumps(result.report.as_dict()))["nodes"]}


def test_region_rolled_back_by_verification_has_its_record():
    result = graphfix.fix(_two_relus(), passes=[_test_pass("half-wrong", {"Relu"}, _wrong_for_bad)])
    records = _records(result)
    bad, good = records["Relu '/bad/Relu'"], records["Relu '/good/Relu'"]
    assert good["verdict"] == KEPT and "reason" not in good
    assert bad["verdict"] == ROLLED_BACK and bad["passes"] == ["half-wrong"] and bad["reason"].startswith("outputs differ: b (max abs")
    assert "Abs" in bad["diagram"] and "Relu /bad/Relu" in bad["diagram"] and bad["outputs"]["b"]["passed"] is False


def test_region_undone_for_the_target_has_its_record():
    """Undone before verification (_undo_new_blockers): a node record with the reason, the
    diagram of the rewrite that was undone, and nothing compared."""
    result = graphfix.fix(_two_relus(), passes=[_test_pass("emits-einsum", {"Relu"}, _einsum_for_bad)], trt="8.0")
    assert "Einsum" not in [n.op_type for n in result.model.graph.node]
    records = _records(result)
    bad = records["Relu '/bad/Relu'"]
    assert bad["verdict"] == ROLLED_BACK and bad["passes"] == ["emits-einsum"] and bad["outputs"] == {}
    assert bad["checked"] == "not compared (undone before verification)"
    assert "which TensorRT 8.0 rejects" in bad["reason"] and "Einsum" in bad["reason"]
    assert "Einsum" in bad["diagram"] and "Relu /bad/Relu" in bad["diagram"]
    assert records["Relu '/good/Relu'"]["verdict"] == KEPT and len(records) == 2
    assert result.report.passes[0].rolled_back_nodes == 1 and result.report.status == "rolled-back"
    html = page(result.report)
    assert "which TensorRT 8.0 rejects" in html and html.count("<svg") == 4
