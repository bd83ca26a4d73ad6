"""The pipeline: per-pass verification, rollback, strict mode, session count, what is preserved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import graphfix
from fixtures.recipes import fold_clip
from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from graphfix.errors import GraphfixError
from graphfix.graph import replace_tensor
from graphfix.onnxio.ir import max_ir_version
from graphfix.onnxio.proto import Assembled
from graphfix.passes import Pass, all_passes
from graphfix.passes.base import LIMIT, Rule
from graphfix.pipeline.settings import StrictFailure
from tests.helpers.support import ort_run

ROOT = Path(__file__).resolve().parents[2]


def _wrong_rewrite(node, ctx):
    """Relu -> Abs: a deliberately wrong 'rewrite' the verifier must catch."""
    replace_tensor(ctx.graph, node.outputs[0], ctx.builder.op("Abs", [node.inputs[0]]))


def _test_pass(name: str, ops: set[str], rewrite, when=None) -> Pass:
    rule = Rule(LIMIT, "all", f"{name} test pattern", when, evidence="test")
    return Pass(name, name, frozenset(ops), (rule,), rewrite, doc="test pass")


WRONG = _test_pass("wrong-relu", {"Relu"}, _wrong_rewrite)
NOOP = _test_pass("noop", {"Relu"}, lambda n, c: None, when=lambda n, c: False)


def _relu_clip_model() -> onnx.ModelProto:
    m = fold_clip.clip_cast_bounds()
    m.graph.node.append(node("Relu", ["y"], ["z"], name="/Relu"))
    m.graph.output[0].CopyFrom(out("z", FLOAT, [2, 8]))
    return m


def test_wrong_pass_is_rolled_back_and_pipeline_goes_on():
    m = _relu_clip_model()
    result = graphfix.fix(m, [WRONG, "fold-clip"])
    wrong, clip = result.report.passes
    assert wrong.name == "wrong-relu" and wrong.verdict == "rolled-back"
    assert "z" in wrong.reason and wrong.outputs["z"]["passed"] is False and wrong.outputs["z"]["max_abs"] > 0
    assert result.report.sessions <= 4  # probe, final, and both again under the users' settings
    assert clip.verdict == "kept"
    ops = [n.op_type for n in result.model.graph.node]
    assert "Relu" in ops and "Abs" not in ops  # the wrong rewrite is gone, the good one kept
    assert result.report.status == "rolled-back"
    feeds = {"x": np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)}
    np.testing.assert_array_equal(ort_run(result.model, feeds)[0], ort_run(m, feeds)[0])


def test_strict_raises_instead_of_rolling_back(tmp_path):
    target = tmp_path / "out.onnx"
    with pytest.raises(StrictFailure) as info:
        graphfix.fix(_relu_clip_model(), [WRONG], strict=True, output=target)
    assert info.value.exit_code == 1 and "wrong-relu" in str(info.value)
    assert not target.exists()


def test_a_pass_that_raises_is_rolled_back():
    def boom(node, ctx):
        raise ZeroDivisionError("bug in pass")

    broken = _test_pass("broken", {"Clip"}, boom)
    result = graphfix.fix(fold_clip.clip_cast_bounds(), [broken, "fold-clip"])
    assert result.report.passes[0].verdict == "error" and "ZeroDivisionError" in result.report.passes[0].reason
    assert result.report.passes[1].verdict == "kept"


def test_sessions_probe_plus_final_whatever_the_pass_count():
    result = graphfix.fix(fold_clip.clip_cast_bounds(), [NOOP, "fold-clip"])
    assert [p.verdict for p in result.report.passes] == ["unchanged", "kept"]
    assert result.report.sessions == 4  # probe and final, then original and fixed under the users' settings
    assert graphfix.fix(fold_clip.clip_cast_bounds(), [NOOP]).report.sessions == 0  # nothing rewritten: nothing run
    assert graphfix.fix(fold_clip.clip_cast_bounds(), "fold-clip", verify=False).report.sessions == 0
    each = graphfix.fix(fold_clip.clip_cast_bounds(), [NOOP, "fold-clip"], verify_each=True)
    # the input and the changed pass, each also under the users' settings
    assert each.report.sessions == 4 and "pass by pass" in each.report.verification


def test_no_verify_keeps_unverified():
    result = graphfix.fix(fold_clip.clip_cast_bounds(), "fold-clip", verify=False)
    assert result.report.passes[0].verdict == "kept-unverified"


def test_written_model_loads_in_onnxruntime_and_keeps_io(tmp_path):
    m = fold_clip.superpoint_descriptor_norm()
    m.ir_version = 14  # what onnx 1.23 writes by default; onnxruntime 1.31 reads at most 13
    target = tmp_path / "fixed.onnx"
    graphfix.fix(m, "all", input_shapes={"feat": (1, 4, 6, 5)}, output=target)
    written = onnx.load(str(target))
    assert written.ir_version <= max_ir_version()
    onnx.checker.check_model(written, full_check=True)
    assert written.graph.input == m.graph.input and written.graph.output == m.graph.output  # names, dtypes, symbolic dims
    feeds = {"feat": np.random.default_rng(0).standard_normal((1, 4, 7, 3)).astype(np.float32)}
    np.testing.assert_allclose(ort_run(written, feeds)[0], ort_run(m, feeds)[0], atol=1e-6)


@pytest.mark.parametrize("name,hint", [
    ("nope", rf"unknown pass 'nope'; 'graphfix passes' lists the {len(all_passes())} passes$"),
    ("fold-clp", "unknown pass 'fold-clp'; did you mean 'fold-clip'\\?$"),
    ("gelu_decompose", "did you mean 'gelu-decompose'\\?$"),
    ("scatter-decompose", "did you mean 'scatternd-decompose' or '[a-z]+-decompose'\\?$"),
])
def test_unknown_pass_suggests_close_names(name, hint):
    """A typo gets the one or two closest names, not the list of every pass."""
    with pytest.raises(GraphfixError, match=hint):
        graphfix.fix(fold_clip.clip_cast_bounds(), f"fold-clip,{name}")


def test_skip_and_subset_keep_pipeline_order():
    names = [p.name for p in graphfix.passes.select("all", skip=["fold-clip"])]
    assert "fold-clip" not in names
    ordered = [p.name for p in graphfix.passes.all_passes()]
    chosen = graphfix.passes.select(list(reversed(ordered)))
    assert [p.name for p in chosen] == ordered


def _clip_as_min_max(node, ctx):
    """Clip(x, lo, hi) -> Min(Max(x, lo), hi): exact, and possible only while the Clip is there."""
    b = ctx.builder
    replace_tensor(ctx.graph, node.outputs[0], b.op("Min", [b.op("Max", node.inputs[:2]), node.inputs[2]]))


CLIP_AS_MIN_MAX = _test_pass("clip-as-min-max", {"Clip"}, _clip_as_min_max)


@pytest.mark.parametrize("where", ["before", "after"])
def test_insert_places_a_pass_by_name(where):
    ordered = list(all_passes())
    chosen = graphfix.passes.insert(CLIP_AS_MIN_MAX, **{where: "range-inputs"})
    at = len(ordered) - 1 if where == "before" else len(ordered)
    assert chosen[at] is CLIP_AS_MIN_MAX
    assert [p for p in chosen if p is not CLIP_AS_MIN_MAX] == ordered  # the pipeline around it unchanged
    first = graphfix.passes.insert(CLIP_AS_MIN_MAX, **{where: "aten-fallback"})
    assert first.index(CLIP_AS_MIN_MAX) == (0 if where == "before" else 1)


def test_insert_into_a_subset_and_chained():
    subset = graphfix.passes.insert(CLIP_AS_MIN_MAX, after="fold-weights", passes=["fold-clip", "fold-weights"])
    assert [p.name for p in subset] == ["fold-clip", "fold-weights", "clip-as-min-max"]
    chained = graphfix.passes.insert(NOOP, before="clip-as-min-max", passes=subset)
    assert [p.name for p in chained] == ["fold-clip", "fold-weights", "noop", "clip-as-min-max"]


def test_inserted_pass_runs_where_it_was_put():
    """Before fold-clip the inserted pass replaces the Clip (fold-clip then has nothing to fold);
    after it, fold-clip folds the Clip's bounds first."""
    for where, folded in (("before", 0), ("after", 1)):
        result = graphfix.fix(fold_clip.clip_cast_bounds(), graphfix.passes.insert(CLIP_AS_MIN_MAX, **{where: "fold-clip"}))
        names = [p.name for p in result.report.passes]
        rewritten = {p.name: p.rewritten for p in result.report.passes}
        assert (names.index("clip-as-min-max") < names.index("fold-clip")) == (where == "before")
        assert rewritten["fold-clip"] == folded and rewritten["clip-as-min-max"] == 1
        assert result.report.status == "ok" and "Clip" not in [n.op_type for n in result.model.graph.node]


@pytest.mark.parametrize("kwargs,message", [
    ({"before": "fold-clp"}, "unknown pass 'fold-clp'; did you mean 'fold-clip'\\?$"),
    ({"after": "nope"}, "unknown pass 'nope'; 'graphfix passes' lists the "),
    ({}, "exactly one of before= or after="),
    ({"before": "fold-clip", "after": "fold-clip"}, "exactly one of before= or after="),
    ({"before": "fold-clip", "passes": ["fold-clp"]}, "unknown pass 'fold-clp'"),
])
def test_insert_refuses_unknown_names_and_unclear_places(kwargs, message):
    with pytest.raises(GraphfixError, match=message):
        graphfix.passes.insert(CLIP_AS_MIN_MAX, **kwargs)


def test_insert_refuses_a_name_already_in_the_pipeline():
    twin = _test_pass("fold-clip", {"Clip"}, _clip_as_min_max)
    with pytest.raises(GraphfixError, match="'fold-clip' is already in the pipeline"):
        graphfix.passes.insert(twin, after="range-inputs")


def test_unrunnable_input_is_a_clear_error():
    m = model([node("Relu", ["x"], ["y"])], [inp("x", FLOAT, ["N", 3])], [out("y", FLOAT, ["N", 3])])
    with pytest.raises(GraphfixError, match="does not fit"):
        graphfix.fix(m, "fold-clip", input_shapes={"x": (2, 4)})


def test_auto_needs_a_version():
    with pytest.raises(GraphfixError, match="--trt"):
        graphfix.fix(fold_clip.clip_cast_bounds(), "auto")


@pytest.mark.parametrize("verify", [False, True])
def test_unchanged_weights_are_written_from_the_input_not_copied(tmp_path, verify):
    """The fixed model keeps the input's initializer protos (no copy of the weights); what is
    written is exactly the model ``result.model`` describes."""
    src = ROOT / "fixtures" / "fold_clip" / "superpoint_descriptor_norm.onnx"
    given = onnx.load(str(src))
    result = graphfix.fix(given, "all", verify=verify)
    parts = result.outcome.fixed
    assert isinstance(parts, Assembled)
    originals = {id(t) for t in given.graph.initializer}
    assert any(id(t) in originals for t in parts.initializers)
    path = tmp_path / "out.onnx"
    result.save(path)
    written = onnx.load(str(path))
    expected = result.model
    expected.ir_version = written.ir_version  # save clamps the IR version to what onnxruntime reads
    assert written == expected
    assert [t.name for t in written.graph.initializer] == [t.name for t in parts.initializers]


def _div_to_mul(node, ctx):
    """x / 3 -> x * (1/3): the same value, rounded differently (one fp16 ulp here and there)."""
    inv = ctx.builder.const(np.asarray(1 / 3, dtype=np.float16), hint="inv")
    replace_tensor(ctx.graph, node.outputs[0], ctx.builder.op("Mul", [node.inputs[0], inv], dtype=np.float16))


def _div_model(elem: int) -> onnx.ModelProto:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    three = onnx.numpy_helper.from_array(np.asarray(3, dtype), "three")
    return model([node("Div", ["x", "three"], ["y"], name="/Div")], [inp("x", elem, [4, 64])], [out("y", elem, [4, 64])], [three])


@pytest.mark.parametrize("elem,kept", [(onnx.TensorProto.FLOAT16, True), (onnx.TensorProto.FLOAT, False)])
def test_fp16_outputs_are_compared_at_fp16_precision(elem, kept):
    """At the float32 default (1e-5) a correct fp16 rewrite would be rolled back; in float32 the
    same 1/3 rounding is still caught."""
    rewrite = _div_to_mul if elem == onnx.TensorProto.FLOAT16 else \
        (lambda n, c: replace_tensor(c.graph, n.outputs[0], c.builder.op("Mul", [n.inputs[0], c.builder.const(np.float32(0.3333))])))
    result = graphfix.fix(_div_model(elem), [_test_pass("div-to-mul", {"Div"}, rewrite)], input_shapes={"x": (4, 64)},
                          val_range={"x": (-100.0, 100.0)})
    record = result.report.passes[0]
    assert record.verdict == ("kept" if kept else "rolled-back")
    if kept:
        assert record.outputs["y"]["max_abs"] > 0  # the rewrite does differ by rounding


def test_tolerance_floors():
    from graphfix.verify.compare import tolerances

    assert tolerances(np.float32, 1e-5, 1e-5) == (1e-5, 1e-5)
    assert tolerances(np.float16, 1e-5, 1e-5) == (4 * 2.0**-10, 4 * 2.0**-10)
    assert tolerances(np.float16, 0.1, 0.1) == (0.1, 0.1)


def test_repeated_pass_findings_are_reported_once_with_the_other_nodes_named():
    """An export repeats its blocks: one note per distinct finding, the other nodes named."""
    from graphfix.report.markdown import markdown
    from graphfix.report.summary import table

    nodes = [node("ReduceProd", ["x", "axes"], [f"y{k}"], name=f"/b{k}/ReduceProd", keepdims=1) for k in range(8)]
    m = model(nodes, [inp("x", FLOAT, [2, "L"])], [out(f"y{k}", FLOAT, [2, 1]) for k in range(8)],
              [onnx.numpy_helper.from_array(np.asarray([1], np.int64), "axes")], opset=18)
    report = graphfix.fix(m, "reduce-axes-input", verify=False).report
    assert len(report.passes[0].findings) == 8
    for text, name in ((table(report), "{}"), (markdown(report), "`{}`")):  # Markdown: names as code spans
        assert text.count("not rewritten") == 1
        named = ", ".join(name.format(f"/b{k}/ReduceProd") for k in range(1, 6))
        assert f"(and 7 more like it: {named}, … (2 more))" in text
