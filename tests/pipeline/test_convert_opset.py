"""--convert-opset N: onnx.version_converter as a verified whole-model step (the fix `graphfix
check` names for a model opset older than a release supports)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import graphfix
from fixtures.recipes._onnx import FLOAT, init, inp, model, node, out
from graphfix.check.findings import check_model
from graphfix.cli.main import main
from graphfix.errors import GraphfixError


def _opset8_upsample() -> onnx.ModelProto:
    """An old export: Upsample with attribute scales (opset 7-8), what the 10.x tables (opset 9+) do not list."""
    graph = helper.make_graph([node("Upsample", ["x"], ["u"], name="up", mode="nearest", scales=[1.0, 1.0, 2.0, 2.0]),
                               node("Relu", ["u"], ["y"], name="relu")], "old",
                              [inp("x", FLOAT, [1, 2, 3, 3])], [out("y", FLOAT, [1, 2, 6, 6])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)], ir_version=4)


def test_check_names_the_step_for_an_old_opset_and_calls_it_a_warning():
    """The parsers warn below opset 7 and the 10.x tables start at 9; no release refuses an old opset."""
    found = [f for f in check_model(_opset8_upsample(), "10.1").findings if f.rule == "opset"]
    assert [f.severity for f in found] == ["warning"]
    assert found[0].remedy.startswith("--convert-opset 13") and "ModelImporter.cpp" in found[0].evidence
    assert not [f for f in check_model(_opset8_upsample(), "8.6").findings if f.rule == "opset"]


def test_converted_model_is_verified_and_kept(tmp_path):
    result = graphfix.fix(_opset8_upsample(), "auto", trt="10.1", convert_opset=13, output=tmp_path / "new.onnx")
    step = result.report.passes[0]
    assert step.name == "convert-opset" and step.verdict == "kept" and step.outputs
    assert all(d["passed"] for d in step.outputs.values())
    written = onnx.load(tmp_path / "new.onnx")
    assert [o.version for o in written.opset_import if o.domain in ("", "ai.onnx")] == [13]
    assert "Resize" in {n.op_type for n in written.graph.node}
    assert result.report.settings["convert_opset"] == 13
    assert not [f for f in check_model(written, "10.1").findings if f.rule == "opset"]


def test_a_model_the_converter_cannot_convert_goes_on_unchanged():
    ln = model([node("LayerNormalization", ["x", "s", "b"], ["y"], name="ln")], [inp("x", FLOAT, [2, 4])],
               [out("y", FLOAT, [2, 4])], [init("s", np.ones(4, np.float32)), init("b", np.zeros(4, np.float32))], opset=17)
    result = graphfix.fix(ln, "auto", trt="10.1", convert_opset=13)
    step = result.report.passes[0]
    assert step.name == "convert-opset" and step.verdict == "error" and "LayerNormalization" in step.reason
    assert result.model.opset_import[0].version == 17


@pytest.mark.parametrize("target", [3, 99])
def test_an_opset_the_converter_cannot_write_is_refused_first(target, tmp_path, capsys):
    with pytest.raises(GraphfixError, match="--convert-opset"):
        graphfix.fix(_opset8_upsample(), "all", convert_opset=target, verify=False)
    path = tmp_path / "old.onnx"
    onnx.save(_opset8_upsample(), path)
    assert main([str(path), str(tmp_path / "new.onnx"), "--convert-opset", str(target)]) == 2
    assert "--convert-opset" in capsys.readouterr().err


@pytest.mark.parametrize("trt", ["7.2", "8.6", "10.1"])
def test_below_opset_7_every_parser_warns(trt):
    graph = helper.make_graph([node("Relu", ["x"], ["y"], name="relu")], "older", [inp("x", FLOAT, [2])], [out("y", FLOAT, [2])])
    old = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)], ir_version=3)
    found = [f for f in check_model(old, trt).findings if f.rule == "opset"]
    assert [f.severity for f in found] == ["warning"] and "at least opset 7" in found[0].message
    assert "--convert-opset 13" in found[0].remedy


def test_a_converted_model_onnxruntime_cannot_run_is_rolled_back(monkeypatch):
    from graphfix.pipeline import steps

    real_run = steps.sessions_mod.run

    def refuse_converted(model, feeds, label, *args, **kw):
        if label == "convert-opset":
            raise RuntimeError("NOT_IMPLEMENTED: Could not find an implementation for Resize(13)")
        return real_run(model, feeds, label, *args, **kw)

    monkeypatch.setattr(steps.sessions_mod, "run", refuse_converted)
    result = graphfix.fix(_opset8_upsample(), "auto", trt="10.1", convert_opset=13)
    step = result.report.passes[0]
    assert step.verdict == "rolled-back" and "cannot run the converted model" in step.reason
    assert result.model.opset_import[0].version == 8
