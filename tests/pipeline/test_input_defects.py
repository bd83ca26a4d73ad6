"""The input's own defects are not blamed on passes, and graphfix's own rank inference goes on where
onnx's stops (issue 22, items 4 and 6): real exports from fixtures/real/export_real_defects.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import graphfix
from fixtures.recipes._onnx import FLOAT, INT64, const, inp, model, node, out
from graphfix.graph import to_graph, to_model
from graphfix.graph.infer import complete
from graphfix.onnxio.validate import checker_problem, declared_shapes
from graphfix.pipeline.checks import _invalid
from graphfix.pipeline.simplify import feed_outputs
from graphfix.report.model import ROLLED_BACK
from tests.helpers.support import ort_run

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "fixtures" / "real"


def _load(name: str) -> onnx.ModelProto:
    return onnx.load(str(REAL / f"{name}.onnx"))


# ------------------------------------------------------------------ input defects (item 4)
def test_scatter_reduce_if_declaring_a_flat_shape_is_fixed_at_8_0_without_a_rollback():
    """The export's If branches declare [24] while computing [3, 8]: once if-inline lets inference
    see through, the full check fails at /If_1, a node scatterelements-decompose never touched."""
    m = _load("scatter_reduce_amax")
    outcome = graphfix.fix(m, passes="auto", trt="8.0")
    report = outcome.report
    assert not [r.name for r in report.passes if r.verdict == ROLLED_BACK or r.rolled_back_nodes], report.passes
    assert {r.name for r in report.passes} >= {"if-inline", "scatterelements-decompose"}
    assert report.blocking_left == []
    assert any("the input declares shapes it does not compute" in n and "/If_1" in n for n in report.notes)
    rng = np.random.default_rng(0)
    feeds = {"base": rng.standard_normal((3, 8)).astype(np.float32), "index": rng.integers(0, 3, (5, 8)),
             "src": rng.standard_normal((5, 8)).astype(np.float32)}
    np.testing.assert_array_equal(ort_run(outcome.model, feeds)[0], ort_run(m, feeds)[0])


def _branch_model(declared: list[int]) -> onnx.ModelProto:
    """y = If(c, then: Identity(x), else: Identity(x)) * 2, the branch outputs declared ``declared``."""
    then = onnx.helper.make_graph([node("Identity", ["x"], ["t"])], "then", [], [out("t", FLOAT, declared)])
    other = onnx.helper.make_graph([node("Identity", ["x"], ["e"])], "else", [], [out("e", FLOAT, declared)])
    graph = onnx.helper.make_graph(
        [const("c", True, np.bool_), node("If", ["c"], ["b"], then_branch=then, else_branch=other),
         const("two", 2.0, np.float32), node("Mul", ["b", "two"], ["y"])],
        "branches", [inp("x", FLOAT, [3, 8])], [out("y", FLOAT, [3, 8])])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)


def test_a_conflict_with_the_inputs_declared_shapes_is_not_the_rewrites():
    source = _branch_model([24])
    assert checker_problem(source, True) is not None  # the input fails once inference sees [3, 8]
    assert _invalid(source, True, source) is None
    assert "t" in declared_shapes(source) and "x" not in declared_shapes(source)


def test_a_wrong_shape_a_rewrite_declares_is_still_refused():
    source = _branch_model([3, 8])
    candidate = onnx.ModelProto()
    candidate.CopyFrom(source)
    candidate.graph.node[-1].output[0] = "y2"  # a new tensor, declared with the wrong rank
    candidate.graph.node.append(node("Identity", ["y2"], ["y"]))
    candidate.graph.value_info.append(onnx.helper.make_tensor_value_info("y2", FLOAT, [24]))
    assert checker_problem(candidate, True) is not None
    assert _invalid(candidate, True, source) is not None


def _folded_output_model() -> onnx.ModelProto:
    """y = Relu(x), and an output k that is an initializer (what onnxsim leaves of a constant output)."""
    m = model([node("Relu", ["x"], ["y"])], [inp("x", FLOAT, [2])], [out("y", FLOAT, [2])])
    m.graph.output.append(out("k", INT64, [3]))
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([1, 2, 3], np.int64), "k"))
    return m


def test_outputs_folded_to_constants_are_fed_by_constant_nodes():
    fed = feed_outputs(_folded_output_model())
    assert checker_problem(fed, True) is None and [n.op_type for n in fed.graph.node] == ["Relu", "Constant"]
    np.testing.assert_array_equal(ort_run(fed, {"x": np.ones(2, np.float32)})[1], [1, 2, 3])
    assert feed_outputs(fed) is fed


def test_an_initializer_output_survives_a_rewrite_of_the_rest():
    """The demo after --simplify: scatternd-cast was refused with "Graph output 'indices1' is not
    an output of any node" because the export dropped the initializer no node reads."""
    m = _folded_output_model()
    graph = to_graph(m)
    graph.nodes[0].op = "Abs"  # any edit: the export no longer reuses the whole model
    written = to_model(graph, m)
    assert checker_problem(written, True) is None
    np.testing.assert_array_equal(ort_run(written, {"x": -np.ones(2, np.float32)})[1], [1, 2, 3])


def test_a_whole_model_step_that_leaves_an_invalid_model_is_rolled_back():
    from graphfix.pipeline.settings import Settings
    from graphfix.pipeline.steps import _whole_model_step
    from graphfix.report.model import Report
    from graphfix.verify import sessions

    m = model([node("Relu", ["x"], ["y"])], [inp("x", FLOAT, [2])], [out("y", FLOAT, [2])])
    broken = onnx.ModelProto()
    broken.CopyFrom(m)
    broken.graph.node[0].input[0] = "nowhere"
    report = Report(None, None, {})
    kept = _whole_model_step("simplify", m, broken, 1, [], Settings(), report, sessions.SessionCounter(), 0.0)
    assert kept is m and report.passes[0].verdict == ROLLED_BACK and "invalid" in report.passes[0].reason


def test_demo_with_simplify_at_8_5_ends_ok(tmp_path):
    pytest.importorskip("onnxsim")
    out_path = tmp_path / "o.onnx"
    run = subprocess.run([sys.executable, "-m", "graphfix", str(ROOT / "fixtures" / "demo" / "superglue_matcher.onnx"),
                          str(out_path), "--passes", "auto", "--trt", "8.5", "--simplify"], capture_output=True, text=True,
                         cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "status: ok" in run.stdout and "rolled-back" not in run.stdout
    written = onnx.load(str(out_path))
    assert checker_problem(written, True) is None


# ------------------------------------------------------------- rank inference (item 6)
def _onnx_unranked(m: onnx.ModelProto) -> set[str]:
    """Tensors onnx's own inference leaves without a rank (what graphfix imported before)."""
    inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    known = {vi.name for vi in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input)
             if vi.type.tensor_type.HasField("shape")}
    return {o for n in m.graph.node for o in n.output if o and o not in known}


@pytest.mark.parametrize("name,op,count", [("ssdlite_op11", "TopK", 9), ("fasterrcnn_op11", "TopK", 3)])
def test_opset_11_detectors_have_ranks_onnx_cannot_infer(name, op, count):
    m = _load(name)
    unranked = _onnx_unranked(m)
    graph = to_graph(m)
    nodes = [n for n in graph.nodes if n.op == op]
    assert len(nodes) == count
    assert all(n.inputs[0].name in unranked for n in nodes)  # onnx alone: the TopK inputs have no rank
    assert all(n.inputs[0].shape is not None and n.inputs[0].dtype is not None for n in nodes)


@pytest.mark.parametrize("name", ["ssdlite_op11", "fasterrcnn_op11"])
def test_opset_11_detectors_are_cleared_at_8_5(name):
    report = graphfix.fix(_load(name), passes="auto", trt="8.5").report
    assert report.blocking_left == []
    topk = next(r for r in report.passes if r.name == "topk-constant-k")
    assert topk.rewritten == topk.matched > 0 and topk.rolled_back_nodes == 0


def test_own_inference_gives_ranks_and_never_guesses_dims():
    """What graphfix infers where onnx left nothing (onnx's data propagation gives up on the opset-11
    detectors' Reshape to a Concat of Shape dims): Reshape's rank is its shape's static length,
    GatherND's follows from NonZero's first dim (the input's rank), unary ops keep it."""
    m = model([node("ReduceMax", ["x"], ["mx"], keepdims=0), node("Cast", ["mx"], ["n0"], to=INT64),
               const("ax", [0], np.int64), node("Unsqueeze", ["n0", "ax"], ["n"]),
               const("rest", [-1, 2], np.int64), node("Concat", ["n", "rest"], ["target"], axis=0),
               node("Mul", ["x", "x"], ["xx"]), node("Reshape", ["xx", "target"], ["r"]),
               node("NonZero", ["m"], ["nz"]), node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
               node("GatherND", ["r", "idx"], ["g"]), node("Relu", ["g"], ["y"])],
              [inp("x", FLOAT, ["N", 4]), inp("m", onnx.TensorProto.BOOL, ["A", "B", "C"])], [out("y", FLOAT, ["K"])])
    graph = to_graph(m)
    t = graph.tensors()
    for name in ("r", "g", "y"):  # as onnx leaves them on the detectors
        t[name].shape, t[name].dtype = None, None
    t["nz"].shape = ["unk", "unk2"]
    t["idx"].shape = ["unk2", "unk"]
    assert complete(graph) == 3  # r, g, y
    assert t["r"].shape == [None, None, None] and t["r"].dtype == np.float32
    assert t["nz"].shape[0] == 3 and t["idx"].shape[1] == 3
    assert t["g"].shape == ["unk2"] == t["y"].shape and t["y"].dtype == np.float32  # dims only as inferred
    assert complete(graph) == 0  # one walk reaches the fixed point
