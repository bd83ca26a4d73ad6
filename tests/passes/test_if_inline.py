"""if-inline: fixtures, ONNX If node cases, version boundaries, nesting, outer-scope outputs, names."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, const, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.graph import to_graph, to_model
from tests.helpers.support import (
    check_fixture,
    check_rewrite,
    freeze_inputs,
    node_cases,
    ort_run,
    remaining_matches,
)

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "if_inline"}
VERSIONS = ["7.0", "7.1", "7.2", "8.0", "8.4", "8.6", "10.1", "11.1"]


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


def _if_findings(m: onnx.ModelProto, version: str) -> list:
    return [f for f in check_model(m, version).findings if f.op == "If" and f.severity == "blocking"]


def _branch(nodes: list, outputs: list, name: str, inits: list | None = None) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], outputs, inits or [])


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    before = fx.build()
    assert all(_if_findings(before, v) for v in VERSIONS)
    result = check_fixture(fx, "if-inline")
    assert "If" not in _ops(result.model)
    for version in VERSIONS:
        assert not [f for f in check_model(result.model, version).findings if f.severity == "blocking"], version


def test_branch_local_names_are_kept():
    result = passes.get("if-inline").apply(FIXTURES["legacy_rank_test"].build())
    flatten = next(n for n in result.model.graph.node if n.op_type == "Flatten")
    assert flatten.name == "/then/Flatten" and list(flatten.output) == ["picked"]


@pytest.mark.parametrize("version", VERSIONS)
def test_version_boundaries(version):
    """Computed condition + rank mismatch: every release; computed condition, same shapes: < 8.0;
    initializer condition: only 7.0 (no importer), later releases inline it themselves."""
    rank_test = passes.get("if-inline").apply(FIXTURES["legacy_rank_test"].build(), trt=version)
    assert rank_test.rewritten == 1
    same = _if_model(computed=True, same_shapes=True)
    assert (passes.get("if-inline").apply(same, trt=version).rewritten == 1) == (version in ("7.0", "7.1", "7.2"))
    weights = _if_model(computed=False, same_shapes=False)
    assert (passes.get("if-inline").apply(weights, trt=version).rewritten == 1) == (version == "7.0")


def _if_model(computed: bool, same_shapes: bool, cond_value: bool = True) -> onnx.ModelProto:
    then = _branch([node("Relu", ["x"], ["t"], name="/then/Relu")], [helper.make_tensor_value_info("t", FLOAT, [2, 3])], "then")
    other_shape = [2, 3] if same_shapes else [6]
    other = _branch([const("shape6", [-1] if not same_shapes else [2, 3], np.int64), node("Reshape", ["x", "shape6"], ["e"], name="/else/Reshape")],
                    [helper.make_tensor_value_info("e", FLOAT, other_shape)], "else")
    nodes = [const("c0", cond_value, np.bool_)]
    if computed:
        nodes += [node("Not", ["c0"], ["c1"]), node("Not", ["c1"], ["c"])]
    nodes += [node("If", ["c" if computed else "c0"], ["y"], name="/If", then_branch=then, else_branch=other)]
    return model(nodes, [inp("x", FLOAT, [2, 3])], [out("y", FLOAT, [2, 3])], opset=13)


@pytest.mark.parametrize("taken", [True, False])
def test_both_branches_reproduce_the_if(taken):
    m = _if_model(computed=True, same_shapes=True, cond_value=taken)
    result = check_rewrite(m, "if-inline", {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)})
    assert "If" not in _ops(result.model) and ("Relu" in _ops(result.model)) == taken


def test_runtime_condition_is_not_matched():
    then = _branch([node("Relu", ["x"], ["t"])], [helper.make_tensor_value_info("t", FLOAT, [2, 3])], "then")
    other = _branch([node("Neg", ["x"], ["e"])], [helper.make_tensor_value_info("e", FLOAT, [2, 3])], "else")
    m = model([node("If", ["flag"], ["y"], then_branch=then, else_branch=other)],
              [inp("x", FLOAT, [2, 3]), inp("flag", BOOL, [])], [out("y", FLOAT, [2, 3])], opset=13)
    assert passes.get("if-inline").apply(m).matched == 0
    assert remaining_matches(m, "if-inline") == []


def test_nested_if():
    """The taken branch holds another If on x's rank: both are inlined."""
    inner_then = _branch([node("Identity", ["x"], ["xi"]), node("Identity", ["x"], ["xj"])],
                         [helper.make_tensor_value_info("xi", FLOAT, [2, 3]), helper.make_tensor_value_info("xj", FLOAT, [2, 3])], "inner_then")
    inner_else = _branch([node("Neg", ["x"], ["n1"]), node("Neg", ["x"], ["n2"])],
                         [helper.make_tensor_value_info("n1", FLOAT, [2, 3]), helper.make_tensor_value_info("n2", FLOAT, [2, 3])], "inner_else")
    outer_then = _branch(
        [node("Shape", ["x"], ["s"]), node("Size", ["s"], ["r"]), const("two_inner", 2, np.int64), node("Equal", ["r", "two_inner"], ["is2"]),
         node("If", ["is2"], ["a", "b"], name="/inner/If", then_branch=inner_then, else_branch=inner_else),
         node("Add", ["a", "b"], ["ab"])],
        [helper.make_tensor_value_info("ab", FLOAT, [2, 3])], "outer_then")
    outer_else = _branch([node("Relu", ["x"], ["re"])], [helper.make_tensor_value_info("re", FLOAT, [2, 3])], "outer_else")
    m = model(
        [node("Shape", ["x"], ["shape"]), node("Size", ["shape"], ["rank"]), const("two", 2, np.int64),
         node("Equal", ["rank", "two"], ["c"]), node("If", ["c"], ["y"], name="/If", then_branch=outer_then, else_branch=outer_else)],
        [inp("x", FLOAT, [2, 3])], [out("y", FLOAT, [2, 3])], opset=13,
    )
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    result = check_rewrite(m, "if-inline", {"x": x})
    assert "If" not in _ops(result.model)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], 2 * x)
    assert [o.name for o in result.model.graph.output] == ["y"]


def test_a_tensor_returned_twice_gets_an_identity():
    """(onnxruntime cannot load this If itself: its own If inlining rejects the repeated output.)"""
    then = _branch([node("Relu", ["x"], ["t"])], [helper.make_tensor_value_info("t", FLOAT, [2]), helper.make_tensor_value_info("t", FLOAT, [2])], "then")
    other = _branch([node("Neg", ["x"], ["e1"]), node("Neg", ["x"], ["e2"])],
                    [helper.make_tensor_value_info("e1", FLOAT, [2]), helper.make_tensor_value_info("e2", FLOAT, [2])], "else")
    m = model([node("Shape", ["x"], ["s"]), node("Size", ["s"], ["r"]), const("one", 1, np.int64), node("Equal", ["r", "one"], ["cond"]),
               node("If", ["cond"], ["y", "z"], then_branch=then, else_branch=other)],
              [inp("x", FLOAT, [2])], [out("y", FLOAT, [2]), out("z", FLOAT, [2])], opset=13)
    result = passes.get("if-inline").apply(m)
    assert _ops(result.model) == ["Relu", "Identity"] or sorted(_ops(result.model)) == ["Identity", "Relu"]
    x = np.array([-1.0, 2.0], np.float32)
    y, z = ort_run(result.model, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    np.testing.assert_array_equal(z, np.maximum(x, 0))


def test_branches_returning_the_same_name_match_from_8_0():
    """Each branch returns its own initializer, both named ``c`` (valid ONNX, rejected by TensorRT)."""
    then = _branch([], [helper.make_tensor_value_info("c", FLOAT, [2])], "then", [onnx.numpy_helper.from_array(np.ones(2, np.float32), "c")])
    other = _branch([], [helper.make_tensor_value_info("c", FLOAT, [2])], "else", [onnx.numpy_helper.from_array(np.zeros(2, np.float32), "c")])
    m = model([node("Shape", ["x"], ["s"]), node("Size", ["s"], ["r"]), const("one", 1, np.int64), node("Equal", ["r", "one"], ["cond"]),
               node("If", ["cond"], ["y"], then_branch=then, else_branch=other)],
              [inp("x", FLOAT, [2])], [out("y", FLOAT, [2])], opset=13)
    assert passes.get("if-inline").apply(m, trt="8.6").rewritten == 1
    assert any(f.error_id == "if-branch-outputs-count-or-names" for f in _if_findings(m, "8.6"))
    result = check_rewrite(m, "if-inline", {"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(ort_run(result.model, {"x": np.ones(2, np.float32)})[0], np.ones(2, np.float32))


def test_branch_name_clashing_with_the_parent_is_renamed():
    then = _branch([node("Relu", ["x"], ["z"], name="/Relu")], [helper.make_tensor_value_info("z", FLOAT, [2, 3])], "then")
    other = _branch([node("Neg", ["x"], ["e"])], [helper.make_tensor_value_info("e", FLOAT, [2, 3])], "else")
    m = model([const("c0", True, np.bool_), node("Not", ["c0"], ["c1"]), node("Not", ["c1"], ["c"]),
               node("If", ["c"], ["y"], then_branch=then, else_branch=other), node("Sigmoid", ["x"], ["z_outer"], name="/Relu"),
               node("Add", ["y", "z_outer"], ["w"])],
              [inp("x", FLOAT, [2, 3])], [out("w", FLOAT, [2, 3])], opset=13)
    result = check_rewrite(m, "if-inline", {"x": np.ones((2, 3), np.float32)})
    names = [n.name for n in result.model.graph.node]
    assert len(names) == len(set(names)) and "/Relu" in names


@pytest.mark.parametrize("form", ["initializer", "Constant node"])
@pytest.mark.parametrize("taken", [True, False])
def test_a_branch_value_named_like_the_ifs_output_is_renamed(taken, form):
    """optimum's merged decoder: the with-past branch returns a placeholder (a Constant node there)
    named like the If's own output ('present.0.encoder.key'); kept, the inlined graph held two
    tensors of that name (onnx: not SSA) and the rewrite was rolled back. As an initializer,
    onnx-graphsurgeon's import bound the branch to the outer tensor itself."""
    empty = onnx.numpy_helper.from_array(np.zeros((0, 2), np.float32), "y")
    placeholder = helper.make_tensor_value_info("y", FLOAT, [0, 2])
    then = _branch([], [placeholder], "then", [empty]) if form == "initializer" else \
        _branch([node("Constant", [], ["y"], value=empty)], [placeholder], "then")
    other = _branch([node("Relu", ["x"], ["e"])], [helper.make_tensor_value_info("e", FLOAT, ["n", 2])], "else")
    m = model([const("c", taken, np.bool_), node("Identity", ["c"], ["cond"]),
               node("If", ["cond"], ["y"], then_branch=then, else_branch=other)],
              [inp("x", FLOAT, ["n", 2])], [out("y", FLOAT, [None, 2])], opset=13)
    x = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)
    result = check_rewrite(m, "if-inline", {"x": x})
    onnx.checker.check_model(result.model, full_check=True)
    assert "If" not in _ops(result.model) and ort_run(result.model, {"x": x})[0].shape == ((0, 2) if taken else (2, 2))


@pytest.mark.parametrize("case", node_cases("If"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    """The node cases take the condition as a graph input; frozen to its value (what an exporter's
    folded condition looks like), the pass inlines the branch and reproduces the expected output."""
    for inputs, expected in case.data_sets:
        cond_name = case.model.graph.input[0].name
        m = freeze_inputs(case.model, {cond_name: np.asarray(inputs[0])})
        try:
            to_model(to_graph(m), m)
        except Exception as exc:  # noqa: BLE001 - onnx-graphsurgeon cannot export optional types
            pytest.skip(f"onnx-graphsurgeon cannot round-trip {case.name} (optional types): {exc}")
        result = passes.get("if-inline").apply(m)
        assert result.rewritten == 1 and "If" not in _ops(result.model)
        try:
            got = ort_run(result.model, {})
        except Exception as exc:  # noqa: BLE001
            pytest.skip(f"onnxruntime cannot run {case.name}: {exc}")
        for g, e in zip(got, expected, strict=True):
            if isinstance(e, list):
                assert len(g) == len(e) and all(np.array_equal(a, b) for a, b in zip(g, e, strict=True))
            else:
                np.testing.assert_array_equal(g, e)


def test_sequence_branch_outputs_keep_their_types():
    m = freeze_inputs(node_cases("If")[0].model, {"cond": np.array(True)})
    out_model = passes.get("if-inline").apply(m).model
    assert out_model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


# ------------------------------------------------ Ifs decided by shapes (TorchScript's input.dim())
def _rank_condition(form: str) -> list:
    """``unbatched`` computed from x's static rank or a static dim only (x's batch dim is dynamic)."""
    nodes = [node("Shape", ["x"], ["shp"])]
    if form == "size":  # x.dim() == 2
        nodes += [node("Size", ["shp"], ["rank"]), const("two", 2, np.int64), node("Equal", ["rank", "two"], ["batched"])]
    elif form == "shape_of_shape":  # Shape -> Shape -> Gather, the constant through a Cast
        nodes += [node("Shape", ["shp"], ["shp2"]), const("zero", 0, np.int64), node("Gather", ["shp2", "zero"], ["rank"], axis=0),
                  const("two32", 2, np.int32), node("Cast", ["two32"], ["two"], to=TensorProto.INT64),
                  node("Equal", ["rank", "two"], ["batched"])]
    elif form == "dim_and_rank":  # x.dim() == 2 and x.shape[1] == 4
        nodes += [node("Size", ["shp"], ["rank"]), const("two", 2, np.int64), node("Equal", ["rank", "two"], ["is2"]),
                  const("one", 1, np.int64), node("Gather", ["shp", "one"], ["d1"], axis=0), const("four", 4, np.int64),
                  node("Equal", ["d1", "four"], ["is4"]), node("And", ["is2", "is4"], ["batched"])]
    return [*nodes, node("Not", ["batched"], ["unbatched"])]


def _recurrent_cell(form: str) -> onnx.ModelProto:
    """torch.jit.script of LSTMCell/GRUCell: ``if not is_batched: input = input.unsqueeze(0)``, the
    cell, then ``if not is_batched: ret = ret.squeeze(0)``: two Ifs whose branches differ in rank,
    the second one's branch shapes unknown until the first is gone."""
    vi = helper.make_tensor_value_info
    unsqueeze = _branch([const("ax", [0], np.int64), node("Unsqueeze", ["x", "ax"], ["xu"])], [vi("xu", FLOAT, None)], "then")
    keep = _branch([node("Identity", ["x"], ["xi"])], [vi("xi", FLOAT, None)], "else")
    squeeze = _branch([const("ax2", [0], np.int64), node("Squeeze", ["h", "ax2"], ["hs"])], [vi("hs", FLOAT, None)], "then2")
    keep2 = _branch([node("Identity", ["h"], ["hi"])], [vi("hi", FLOAT, None)], "else2")
    nodes = [*_rank_condition(form),
             node("If", ["unbatched"], ["x3"], name="/If_unsqueeze", then_branch=unsqueeze, else_branch=keep),
             node("Tanh", ["x3"], ["h"], name="/cell/Tanh"),
             node("If", ["unbatched"], ["y"], name="/If_squeeze", then_branch=squeeze, else_branch=keep2)]
    return model(nodes, [inp("x", FLOAT, ["batch", 4])], [out("y", FLOAT, ["batch", 4])], opset=17)


def _all_ops(m: onnx.ModelProto) -> list[str]:
    from graphfix.onnxio.proto import all_nodes

    return [n.op_type for n in all_nodes(m.graph)]


@pytest.mark.parametrize("version", ["8.5", "10.1"])
@pytest.mark.parametrize("form", ["size", "shape_of_shape", "dim_and_rank"])
def test_rank_test_ifs_of_a_scripted_cell_are_inlined(form, version):
    """Before: the second If (its branch shapes unknown) stayed for TensorRT to build both branches."""
    import graphfix

    m = _recurrent_cell(form)
    result = graphfix.fix(m, passes="auto", trt=version, input_shapes={"x": (3, 4)})
    assert result.report.status == "ok"
    assert "If" not in _all_ops(result.model)
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], np.tanh(x), rtol=1e-6)
    assert not _if_findings(result.model, version)


def test_rank_test_ifs_inside_a_loop_body_are_inlined():
    import graphfix
    from tests.helpers.control_flow import strictly_inferred, wrapped_in_loop

    m = wrapped_in_loop(_recurrent_cell("size"))
    result = graphfix.fix(m, passes="auto", trt="8.5", input_shapes={"x": (3, 4)})
    assert result.report.status == "ok"
    assert "If" not in _all_ops(result.model) and "Loop" in _all_ops(result.model)
    strictly_inferred(result.model)


def _chained_cells() -> onnx.ModelProto:
    """Two scripted cells in a row (LSTMCell then GRUCell): the second one's ``input.dim()`` reads
    the first one's output, an If output with no declared type, so its rank is known only once the
    first cell's Ifs are inlined (torchscript_rnn_cell_sr_switch.onnx: /net16k/If_1, /net8k/lstm/If)."""
    first = _recurrent_cell("size")
    vi = helper.make_tensor_value_info
    nodes = list(first.graph.node)
    nodes[-1].output[0] = "g"  # the first cell's output
    second = [node("Shape", ["g"], ["gshp"]), node("Size", ["gshp"], ["grank"]), const("gtwo", 2, np.int64),
              node("Equal", ["grank", "gtwo"], ["gbatched"]), node("Not", ["gbatched"], ["gunbatched"])]
    unsqueeze = _branch([const("gax", [0], np.int64), node("Unsqueeze", ["g", "gax"], ["gu"])], [vi("gu", FLOAT, None)], "gthen")
    keep = _branch([node("Identity", ["g"], ["gi"])], [vi("gi", FLOAT, None)], "gelse")
    squeeze = _branch([const("gax2", [0], np.int64), node("Squeeze", ["k", "gax2"], ["ks"])], [vi("ks", FLOAT, None)], "gthen2")
    keep2 = _branch([node("Identity", ["k"], ["ki"])], [vi("ki", FLOAT, None)], "gelse2")
    second += [node("If", ["gunbatched"], ["g3"], name="/gru/If_unsqueeze", then_branch=unsqueeze, else_branch=keep),
               node("Sigmoid", ["g3"], ["k"], name="/gru/Sigmoid"),
               node("If", ["gunbatched"], ["y"], name="/gru/If_squeeze", then_branch=squeeze, else_branch=keep2)]
    return model([*nodes, *second], [inp("x", FLOAT, ["batch", 4])], [out("y", FLOAT, ["batch", 4])], opset=17)


@pytest.mark.parametrize("version", ["8.5", "10.1"])
def test_a_rank_test_on_an_inlined_ifs_output_folds_too(version):
    """Before: the second cell's Ifs stayed (the first cell's output had no rank when they were matched)."""
    import graphfix

    m = _chained_cells()
    result = graphfix.fix(m, passes="auto", trt=version, input_shapes={"x": (3, 4)})
    assert result.report.status == "ok", [p.reason for p in result.report.passes]
    assert "If" not in _all_ops(result.model)
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], 1 / (1 + np.exp(-np.tanh(x))), rtol=1e-5)


def test_rank_test_ifs_whose_outputs_are_an_untyped_branchs_outputs_are_inlined():
    """Inside an If's branch, the inlined If's output is the branch's output (declared without a
    shape, as the TorchScript exporter does): the ops' inference types it, which is no change of
    the branch's ends. Before: the pass was rolled back ("the inputs/outputs of body ... changed")."""
    import graphfix
    from tests.helpers.control_flow import CONDITION, wrapped_in_if

    vi = helper.make_tensor_value_info
    unsqueeze = _branch([const("ax", [0], np.int64), node("Unsqueeze", ["x", "ax"], ["xu"])], [vi("xu", FLOAT, None)], "then")
    keep = _branch([node("Tanh", ["x"], ["xt"])], [vi("xt", FLOAT, None)], "else")
    cell = model([*_rank_condition("size"), node("If", ["unbatched"], ["y"], name="/If_unsqueeze", then_branch=unsqueeze,
                                                 else_branch=keep)], [inp("x", FLOAT, ["batch", 4])], [out("y", FLOAT, ["batch", 4])], opset=17)
    m = wrapped_in_if(cell)
    for attr in m.graph.node[0].attribute:
        for o in attr.g.output:
            o.type.tensor_type.ClearField("shape")
    result = graphfix.fix(m, passes="auto", trt="8.5", input_shapes={"x": (3, 4)})
    assert [p.reason for p in result.report.passes if p.reason] == []
    assert _all_ops(result.model).count("If") == 1  # the runtime If on the graph input stays
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    for flag in (True, False):
        np.testing.assert_allclose(ort_run(result.model, {"x": x, CONDITION: np.array(flag)})[0], np.tanh(x), rtol=1e-6)
