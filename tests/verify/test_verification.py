"""Verification on real exports: shapes found without hints, several shapes, <= 2 sessions,
node-level rollback, IR/opset limits asked of onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import graphfix
from fixtures.make_fixtures import all_fixtures, path_of
from fixtures.recipes import fold_clip
from fixtures.recipes._onnx import FLOAT, const, inp, model, node, out
from graphfix.graph import replace_tensor
from graphfix.passes import Pass
from graphfix.passes.base import LIMIT, Rule
from graphfix.verify import compare
from graphfix.verify import sessions as sessions_mod

DEMO = Path(__file__).resolve().parents[2] / "fixtures" / "demo" / "superglue_matcher.onnx"
DYNAMIC = [(g, fx) for g, fx in all_fixtures() if g == "dynamic_shapes"] + [
    (g, fx) for g, fx in all_fixtures() if fx.name == "reflection_pad2d"]


def _test_pass(name: str, ops: set[str], rewrite) -> Pass:
    return Pass(name, name, frozenset(ops), (Rule(LIMIT, "all", "test pattern", evidence="test"),), rewrite, doc="test")


@pytest.mark.parametrize("group,fx", DYNAMIC, ids=lambda x: getattr(x, "name", x))
def test_dynamic_export_fixed_without_shape_hints(group, fx):
    with pytest.raises(Exception):  # noqa: B017 - the point: dims = 1 does not run
        onnx_ones = {vi.name: tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim) for vi in fx.build().graph.input}
        graphfix.fix(fx.build(), list(fx.passes), input_shapes=onnx_ones)
    result = graphfix.fix(str(path_of(group, fx)), list(fx.passes))
    assert all(p.verdict == "kept" for p in result.report.passes), [p.reason for p in result.report.passes]
    used = result.report.shapes["shapes"]
    assert len(used) == 2 and used[0] != used[1], used  # two distinct shapes: one shape hides shape bugs
    assert "role suggests" in result.report.shapes["reason"] or "found by trying" in result.report.shapes["reason"]


def test_shared_dim_names_get_one_value():
    fx = next(fx for g, fx in DYNAMIC if fx.name == "shared_dims")
    shapes = graphfix.fix(fx.build(), list(fx.passes)).report.shapes["shapes"]
    assert all(s["a"] == s["b"] for s in shapes)


def _reduce_to_identity(node, ctx):
    """ReduceSum(x[2, n], axes=[1], keepdims=1) -> Identity: right only when n = 1."""
    replace_tensor(ctx.graph, node.outputs[0], ctx.builder.op("Identity", [node.inputs[0]]))


def test_shape_bug_caught_without_hints():
    m = model([const("axes", [1], np.int64), node("ReduceSum", ["x", "axes"], ["y"], keepdims=1, name="/ReduceSum")],
              [inp("x", FLOAT, [2, "n"])], [out("y", FLOAT, [2, 1])])
    result = graphfix.fix(m, passes=[_test_pass("reduce-identity", {"ReduceSum"}, _reduce_to_identity)])
    record = result.report.passes[0]
    assert record.verdict == "rolled-back", record
    assert [n.op_type for n in result.model.graph.node if n.op_type != "Constant"] == ["ReduceSum"]


def test_many_passes_cost_four_sessions():
    fx = next(fx for g, fx in all_fixtures() if fx.name == "superglue_matcher")
    result = graphfix.fix(fx.build(), "all", input_shapes=fx.input_shapes or None)
    changed = [p for p in result.report.passes if p.verdict == "kept"]
    # probe and final, then the original and the fixed model under the users' settings
    assert len(changed) >= 5 and result.report.sessions <= 4, (len(changed), result.report.sessions)
    each = graphfix.fix(fx.build(), "all", input_shapes=fx.input_shapes or None, verify_each=True)
    assert each.report.sessions > 2  # whole-pass checking: one session per changed pass


def _relu_model() -> onnx.ModelProto:
    return model([node("Relu", ["x"], ["a"], name="/good/Relu"), node("Neg", ["x"], ["n"]),
                  node("Relu", ["n"], ["b"], name="/bad/Relu"), node("Add", ["a", "b"], ["y"])], [inp("x", FLOAT, [3, 4])], [out("y", FLOAT, [3, 4])])


def _half_wrong(node, ctx):
    """Relu -> Max(x, 0) (right) for /good, Abs (wrong) for /bad."""
    x = node.inputs[0]
    new = ctx.builder.op("Abs", [x]) if "bad" in node.name else ctx.builder.op("Max", [x, np.array(0, np.float32)])
    replace_tensor(ctx.graph, node.outputs[0], new)


def test_only_the_broken_node_is_rolled_back():
    result = graphfix.fix(_relu_model(), passes=[_test_pass("half-wrong", {"Relu"}, _half_wrong)])
    ops = [n.op_type for n in result.model.graph.node]
    assert ops.count("Relu") == 1 and "Max" in ops and "Abs" not in ops
    record = result.report.passes[0]
    assert record.rewritten == 2 and record.rolled_back_nodes == 1 and "/bad/Relu" in record.reason
    verdicts = {tuple(r["nodes"]): r["verdict"] for r in result.report.nodes}
    assert verdicts == {("Relu '/good/Relu'",): "kept", ("Relu '/bad/Relu'",): "rolled-back"}
    assert all("flowchart LR" in r["diagram"] for r in result.report.nodes)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    from tests.helpers.support import ort_run

    np.testing.assert_array_equal(ort_run(result.model, {"x": x})[0], ort_run(_relu_model(), {"x": x})[0])


def test_new_ir_and_opset_the_runtime_reads_are_fixed_not_refused():
    from graphfix.onnxio.ir import runtime_limits

    ir, opset = runtime_limits()
    m = fold_clip.clip_cast_bounds()
    m.opset_import[0].version = min(opset, 22)
    m.ir_version = ir
    result = graphfix.fix(m, "fold-clip")
    assert result.report.passes[0].verdict == "kept"


def test_markdown_report_has_diagrams(tmp_path):
    result = graphfix.fix(fold_clip.clip_cast_bounds(), "fold-clip")
    result.save_report(tmp_path / "r.md")
    text = (tmp_path / "r.md").read_text()
    assert "```mermaid" in text and "flowchart LR" in text


def test_a_model_only_default_onnxruntime_settings_run_is_verified_with_them(monkeypatch):
    """Verification's tuned sessions (no optimizations, no memory pattern) must never refuse a model
    a default onnxruntime session runs: here the tuned settings are made to fail, as they do on a
    legacy scatter_reduce If whose branch declares [24] while computing [3,8]."""
    from graphfix.runtime import session as session_mod

    real = session_mod.session

    def tuned_fails(model, base_dir, tuned=True):
        if tuned:
            raise RuntimeError("The output OrtValue provided for output 'y' has shape {24} but the computed output shape is {3,8}")
        return real(model, base_dir, tuned)

    monkeypatch.setattr(session_mod, "session", tuned_fails)
    result = graphfix.fix(str(DEMO), "all")
    assert any(r.verdict == "kept" for r in result.report.passes)
    assert sessions_mod.DEFAULT_SETTINGS_NOTE in result.report.notes
    assert result.report.sessions == 3  # the tuned attempt that failed, then probe and final with defaults


def _amplifier(scale: float) -> onnx.ModelProto:
    """y = x * 37.3 (the rewritten node), then y @ W1 + y @ W2 with W2 = -W1 + 1e-3 noise: the
    outputs are a thousand times smaller than what they cancel, so one ulp of y shows at 1e-4."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((64, 64)) * 10).astype(np.float32)
    w2 = (-w1 + rng.standard_normal((64, 64)) * 1e-3).astype(np.float32)
    return model([const("c", scale, np.float32), node("Mul", ["x", "c"], ["y"], name="/Mul"),
                  const("w1", w1, np.float32), const("w2", w2, np.float32),
                  node("MatMul", ["y", "w1"], ["z1"]), node("MatMul", ["y", "w2"], ["z2"]), node("Add", ["z1", "z2"], ["out"])],
                 [inp("x", FLOAT, [8, 64])], [out("out", FLOAT, [8, 64])])


def _mul_as_div(factor: float, c: float = 37.3):
    def rewrite(node, ctx):
        """x * c -> x / (1 / c): the same value to an ulp when factor is 1, wrong otherwise."""
        replace_tensor(ctx.graph, node.outputs[0], ctx.builder.op("Div", [node.inputs[0], np.array(1 / (c * factor), np.float32)]))
    return rewrite


def test_exact_rewrite_on_an_amplifying_model_is_kept_within_its_noise_floor():
    """A fixed 1e-5 rolled back exact rewrites of deep models (RAFT): end to end, the fixed model is
    compared with the original's own noise floor; given --atol/--rtol are used exactly."""
    exact = _test_pass("mul-as-div", {"Mul"}, _mul_as_div(1.0))
    strict = graphfix.fix(_amplifier(37.3), passes=[exact], atol=1e-5, rtol=1e-5)
    assert strict.report.passes[0].verdict == "rolled-back"  # beyond 1e-5 end to end: really amplified
    result = graphfix.fix(_amplifier(37.3), passes=[exact])
    assert result.report.passes[0].verdict == "kept", result.report.passes[0].reason
    floor, final = result.report.noise_floor["out"], result.report.final["out"]
    assert final["passed"] and final["noise_floor"] == floor
    assert 1e-5 < final["max_abs"] <= compare.NOISE_MULTIPLE * floor
    assert "noise floor" in graphfix.report.summary.table(result.report)


def test_wrong_rewrite_is_rolled_back_whatever_the_noise_floor():
    wrong = _test_pass("mul-as-div", {"Mul"}, _mul_as_div(1.001))
    result = graphfix.fix(_amplifier(37.3), passes=[wrong])
    assert result.report.passes[0].verdict == "rolled-back"


def test_unusable_outputs_are_named():
    a = np.array([1.0, 2.0], np.float32)
    assert sessions_mod.unusable([a], [a.copy()], ["y"]) is None
    assert "differ between two identical runs" in sessions_mod.unusable([a], [a + 1], ["y"])
    assert "all NaN" in sessions_mod.unusable([np.full(3, np.nan, np.float32)] * 2, [np.full(3, np.nan, np.float32)] * 2, ["y", "z"])
    flat = np.zeros(4, np.float32)
    assert "constant" in sessions_mod.unusable([flat], [flat], ["y"])
    assert sessions_mod.unusable([flat, a], [flat, a], ["y", "z"]) is None  # one constant output is fine
