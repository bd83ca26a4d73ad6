"""The written model agrees with the original under the settings users run: onnxruntime's
defaults (graph optimizations on, as polygraphy's onnxrt runner and a plain InferenceSession use),
not only under verification's own sessions (optimizations off)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import graphfix
from fixtures.recipes._onnx import INT64, inp, model, node, out
from graphfix.cli.main import main
from graphfix.graph import replace_tensor
from graphfix.passes import Pass
from graphfix.passes.base import LIMIT, Rule

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
SWIN = REAL / "swin_dynamo_dynamic_hw.onnx"


def _default_session(m: onnx.ModelProto | Path) -> ort.InferenceSession:
    data = m.SerializeToString() if isinstance(m, onnx.ModelProto) else str(m)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("trt", ["8.0", "8.2"])
def test_swin_dynamo_matches_the_original_under_a_default_session(trt):
    """transformers Swin, dynamo, dynamic H/W: mod-decompose's integer arithmetic used to be read
    otherwise by DivMulFusion (off by 0.2-0.5 under a default session, exact with it off)."""
    result = graphfix.fix(str(SWIN), "auto", trt=trt)
    assert result.report.status == "ok", result.report.notes
    mod = next(p for p in result.report.passes if p.name == "mod-decompose")
    assert mod.verdict == "kept" and mod.rolled_back_nodes == 0 and mod.rewritten == 16
    assert not any(n.op_type == "Mod" for n in result.model.graph.node)
    assert all(d["passed"] for d in result.report.users["outputs"].values())
    original, fixed = _default_session(SWIN), _default_session(result.model)
    for batch, h, w in [(1, 224, 224), (1, 56, 56), (2, 48, 64)]:
        x = np.random.default_rng(h * w).standard_normal((batch, 3, h, w)).astype(np.float32)
        for name, a, b in zip(["last_hidden_state", "pooler_output"], original.run(None, {"pixel_values": x}),
                              fixed.run(None, {"pixel_values": x}), strict=True):
            assert float(np.abs(a - b).max()) < 1e-5, (trt, (h, w), name)


def _divmul_sensitive(node_, ctx) -> None:
    """Integer Mod as ``x - y * Div(x, y)``: exact where Div truncates, but onnxruntime's
    DivMulFusion rewrites ``Mul(y, Div(1, y))`` into ``Div(y, y)`` when x is the constant 1."""
    b = ctx.builder
    x, y = node_.inputs
    replace_tensor(ctx.graph, node_.outputs[0], b.op("Sub", [x, b.op("Mul", [y, b.op("Div", [x, y])])]))


DIVMUL = Pass("divmul-sensitive-mod", "test", frozenset({"Mod"}),
              (Rule(LIMIT, "all", "test pattern", lambda n, c: int(n.attrs.get("fmod", 0)) == 1, evidence="test"),),
              _divmul_sensitive, doc="test pass")


def _one_mod_y() -> onnx.ModelProto:
    return model([node("Constant", [], ["one"], value=onnx.numpy_helper.from_array(np.ones((1,), np.int64))),
                  node("Mod", ["one", "y"], ["r"], fmod=1)], [inp("y", INT64, ["N"])], [out("r", INT64, ["N"])], opset=13)


@pytest.mark.parametrize("verify_each", [False, True])
def test_a_difference_under_the_users_settings_only_rolls_the_region_back(verify_each):
    """The rewrite agrees in verification's sessions and differs under onnxruntime's defaults: the
    region is found (probe under those settings), undone and named; the model keeps its Mod.
    Pass by pass, each pass is judged under both settings."""
    feeds = [{"y": np.array([2, 3, 5, 7, -4], np.int64)}]
    result = graphfix.fix(_one_mod_y(), [DIVMUL], inputs=feeds, verify_each=verify_each)
    rec = result.report.passes[0]
    assert rec.verdict == "rolled-back" and "only under onnxruntime's default session settings" in rec.reason
    assert [n.op_type for n in result.model.graph.node].count("Mod") == 1
    if verify_each:
        return
    assert result.report.users["rolled_back"] == 1 and result.report.final["r"]["passed"]
    assert [n.op_type for n in result.model.graph.node].count("Mod") == 1
    assert "not under onnxruntime's default session settings" in " ".join(result.report.notes)
    np.testing.assert_array_equal(_default_session(result.model).run(None, feeds[0])[0], np.fmod(1, feeds[0]["y"]))


def test_polygraphy_onnxrt_passes_with_graphfix_side_files(tmp_path):
    """What the README tells users to run: polygraphy's onnxrt runner (default settings) on the
    written model against graphfix's side files passes."""
    polygraphy = Path(sys.executable).with_name("polygraphy")
    if not polygraphy.exists():
        pytest.skip("no polygraphy command beside this Python")
    dst, rep = tmp_path / "out.onnx", tmp_path / "r.json"
    assert main([str(SWIN), str(dst), "--passes", "auto", "--trt", "8.0", "--report", str(rep), "--quiet"]) == 0
    files = json.loads(rep.read_text())["files"]
    run = subprocess.run([str(polygraphy), "run", str(dst), "--onnxrt", "--load-inputs",
                          files["polygraphy_inputs"], "--load-outputs", files["polygraphy_outputs"],
                          "--atol", "0.001", "--rtol", "0.001"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def _results(name: str, *arrays: np.ndarray):
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    runs = RunResults()
    runs.append(("r", [IterationResult({name: a}) for a in arrays]))
    return runs


@pytest.mark.parametrize("swap_boundary", [False, True])
def test_tie_sensitive_output_is_compared_as_sorted_values_and_says_why(swap_boundary):
    """Near-tied rows of a TopK-dependent output in another order pass as sorted values, with a note
    and advice for comparing another runtime; a different row (not a reordering) still fails."""
    from graphfix.pipeline.settings import Settings
    from graphfix.pipeline.verification import _ties_in_another_order
    from graphfix.report.model import Report
    from graphfix.verify import compare as compare_mod

    ref = np.array([[0.9, 1.0], [0.5, 2.0], [0.5, 3.0]], np.float32)
    cand = ref[[0, 2, 1]].copy()
    if swap_boundary:
        cand[2] = [0.5, 7.0]  # another anchor chosen at the k-th place: not a reordering
    report = Report(None, None, {}, discrete={"decisions": {}, "outputs": {"boxes": ["TopK '/TopK'"]}, "inputs": 1})
    diffs = compare_mod.compare(_results("boxes", ref), _results("boxes", cand), 1e-5, 1e-5)
    assert not diffs["boxes"].passed
    _ties_in_another_order(diffs, _results("boxes", ref), _results("boxes", cand), Settings(), report)
    assert diffs["boxes"].passed != swap_boundary
    if not swap_boundary:
        assert "tie-sensitive" in diffs["boxes"].note and "sorted values" in diffs["boxes"].note
        assert "--compare-func indices" in report.notes[0]


def test_output_that_depends_on_no_decision_is_never_compared_sorted():
    from graphfix.pipeline.settings import Settings
    from graphfix.pipeline.verification import _ties_in_another_order
    from graphfix.report.model import Report
    from graphfix.verify import compare as compare_mod

    ref = np.array([1.0, 2.0, 3.0], np.float32)
    diffs = compare_mod.compare(_results("y", ref), _results("y", ref[::-1].copy()), 1e-5, 1e-5)
    _ties_in_another_order(diffs, _results("y", ref), _results("y", ref[::-1].copy()), Settings(), Report(None, None, {}))
    assert not diffs["y"].passed


def test_a_whole_model_step_that_differs_under_the_users_settings_only_is_rolled_back(monkeypatch):
    """--fix-shapes (like --simplify) is verified end to end, under both settings: a frozen model
    that onnxruntime's default optimizer reads otherwise is not kept."""
    from graphfix.pipeline import fix_shapes

    def freeze(model, shapes):  # stands in for a step that writes the DivMulFusion-sensitive form
        frozen = model.__class__()
        frozen.CopyFrom(model)
        graph = frozen.graph
        del graph.node[1:]
        graph.node.extend([node("Div", ["one", "y"], ["q"]), node("Mul", ["y", "q"], ["p"]), node("Sub", ["one", "p"], ["r"])])
        return frozen, 1

    monkeypatch.setattr(fix_shapes, "freeze", freeze)
    result = graphfix.fix(_one_mod_y(), "fold-clip", fix_shapes={"y": [6]}, val_range={"y": (2, 9)})
    rec = next(p for p in result.report.passes if p.name == "fix-shapes")
    assert rec.verdict == "rolled-back" and "only under onnxruntime's default session settings" in rec.reason
    assert [n.op_type for n in result.model.graph.node].count("Mod") == 1
