"""if-rank-unify: fixtures both ways, check/auto, readers that depend on the rank left alone, bodies,
shapes/axes/dtypes, the ONNX If node cases, and the TorchScript detector it must not touch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import graphfix
from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, INT64, const, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import BLOCKING, check_model, passes_for
from graphfix.graph import to_graph, to_model
from graphfix.graph.edits import EditLog
from graphfix.graph.importer import all_graphs
from graphfix.onnxio.proto import all_nodes
from tests.helpers.control_flow import CONDITION, matches, strictly_inferred, wrapped_in_if, wrapped_in_loop
from tests.helpers.support import (
    assert_outputs_match,
    check_rewrite,
    node_cases,
    ort_run,
    runs_on_onnxruntime,
)

NAME = "if-rank-unify"
FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "if_rank_unify"}
FIXTURE_NAMES = ["squeeze_dynamic_dim_reshape", "unsqueeze_on_flag_flatten"]
REAL = "fixtures/real/torchscript_vad_sr_switch.onnx"
vi = helper.make_tensor_value_info


def _rank_differences(m: onnx.ModelProto) -> list[str]:
    """Every If (any depth) with an output whose branches return different ranks."""
    found = []
    for g in all_graphs(to_graph(m)):
        for n in g.nodes:
            if n.op != "If":
                continue
            for k, (a, b) in enumerate(zip(n.attrs["then_branch"].outputs, n.attrs["else_branch"].outputs, strict=True)):
                if a.shape is not None and b.shape is not None and len(a.shape) != len(b.shape):
                    found.append(f"{n.name}:{k}")
    return found


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in all_nodes(m.graph)]


def _if_findings(m: onnx.ModelProto, version: str) -> list:
    return [f for f in check_model(m, version).findings if f.op == "If" and f.severity == BLOCKING]


def _unchanged(m: onnx.ModelProto) -> None:
    result = passes.get(NAME).apply(m, trt="8.5")
    assert result.matched == 0 and result.rewritten == 0
    assert result.model is m


# ------------------------------------------------------------------------------- the fixtures
_FEEDS = {
    "squeeze_dynamic_dim_reshape": [{"x": (2, 1, 16)}, {"x": (2, 3, 16)}],
    "unsqueeze_on_flag_flatten": [{"x": (3, 8), "unbatched": True}, {"x": (3, 8), "unbatched": False}],
}


def _feeds(spec: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {k: np.array(v) if isinstance(v, bool) else rng.standard_normal(v).astype(np.float32) for k, v in spec.items()}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_both_branches_equal_and_one_rank(name):
    fx = FIXTURES[name]
    before = fx.build()
    assert _rank_differences(before)
    fixed = None
    for spec in _FEEDS[fx.name]:  # each condition value: the changed branch and the other
        result = check_rewrite(before, NAME, _feeds(spec))
        fixed = result.model
    assert _rank_differences(fixed) == []
    assert not {"Squeeze", "Unsqueeze"} & set(_ops(fixed))  # the change is dead and gone
    assert "If" in _ops(fixed)  # still a runtime If: nothing decided it
    strictly_inferred(fixed)


@pytest.mark.parametrize("version", ["8.0", "8.5", "8.6", "10.1"])
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_check_names_the_pass_and_auto_runs_it(name, version):
    fx = FIXTURES[name]
    m = fx.build()
    found = _if_findings(m, version)
    assert [f.fix_pass for f in found] == [NAME] and found[0].error_id == "if-branch-shape-mismatch"
    assert NAME in passes_for(check_model(m, version))
    result = graphfix.fix(m, passes="auto", trt=version, input_shapes=fx.input_shapes)
    assert result.report.status == "ok"
    assert [r.verdict for r in result.report.passes if r.name == NAME] == ["kept"]
    assert _if_findings(result.model, version) == []


def test_not_claimed_before_8_0():
    m = FIXTURES["unsqueeze_on_flag_flatten"].build()
    assert passes.get(NAME).apply(m, trt="7.2").matched == 0
    assert all(f.fix_pass != NAME for f in check_model(m, "7.2").findings)


def test_second_run_changes_nothing():
    once = passes.get(NAME).apply(FIXTURES["unsqueeze_on_flag_flatten"].build()).model
    assert passes.get(NAME).apply(once).matched == 0


# ----------------------------------------------------------- readers that depend on the rank
def _flag_model(readers: list, outputs: list, change: str = "Unsqueeze", extra_inputs: tuple = ()) -> onnx.ModelProto:
    """``h = If(flag, change(x), Identity(x))`` with x of shape [B, 8], then ``readers``."""
    if change == "Unsqueeze":
        then = helper.make_graph([const("ax", [0], np.int64), node("Unsqueeze", ["x", "ax"], ["xc"], name="/then/Unsqueeze")],
                                 "then", [], [vi("xc", FLOAT, [1, "B", 8])])
    else:  # Reshape to [B, 2, 4]
        then = helper.make_graph([const("to", [0, 2, 4], np.int64), node("Reshape", ["x", "to"], ["xc"], name="/then/Reshape")],
                                 "then", [], [vi("xc", FLOAT, ["B", 2, 4])])
    other = helper.make_graph([node("Identity", ["x"], ["xi"], name="/else/Identity")], "else", [], [vi("xi", FLOAT, ["B", 8])])
    return model([node("If", ["flag"], ["h"], name="/If", then_branch=then, else_branch=other), *readers],
                 [inp("x", FLOAT, ["B", 8]), inp("flag", BOOL, []), *extra_inputs], outputs, opset=17)


_RANK_DEPENDENT = {
    "add": lambda: _flag_model([node("Add", ["h", "h"], ["y"])], [out("y", FLOAT, ["a", "b"])]),
    "reshape_with_0": lambda: _flag_model([const("s", [0, -1], np.int64), node("Reshape", ["h", "s"], ["y"])],
                                          [out("y", FLOAT, ["a", "b"])]),
    "reshape_to_a_runtime_shape": lambda: _flag_model([node("Reshape", ["h", "s"], ["y"])], [out("y", FLOAT, ["a", "b"])],
                                                      extra_inputs=(inp("s", INT64, [2]),)),
    "reshape_to_shape_of_it": lambda: _flag_model(
        [node("Shape", ["h"], ["hs"]), node("Reshape", ["h", "hs"], ["y"])], [out("y", FLOAT, ["a", "b"])]),
    "flatten_splitting_elsewhere": lambda: _flag_model(  # axis 1: [1, B*8] from the Unsqueeze, [B, 8] from x
        [node("Flatten", ["h"], ["y"], axis=1)], [out("y", FLOAT, ["a", "b"])]),
    "one_reader_of_two": lambda: _flag_model(
        [node("Size", ["h"], ["n"]), node("Relu", ["h"], ["y"])], [out("n", INT64, []), out("y", FLOAT, ["a", "b"])]),
    "graph_output": lambda: _flag_model([], [out("h", FLOAT, ["a", "b"])]),
    "reshape_change_read_by_flatten": lambda: _flag_model(  # [B, 2, 4] vs [B, 8] split at axis 2: [2B, 4] vs [B*8, 1]
        [node("Flatten", ["h"], ["y"], axis=2)], [out("y", FLOAT, ["a", "b"])], change="Reshape"),
}


@pytest.mark.parametrize("case", _RANK_DEPENDENT, ids=str)
def test_rank_dependent_readers_are_left_alone_and_stay_a_finding(case):
    m = _RANK_DEPENDENT[case]()
    _unchanged(m)
    for version in ("8.5", "10.1"):
        (finding,) = _if_findings(m, version)
        assert finding.node == "/If" and finding.fix_pass is None
        assert "rank 3" in finding.message and "rank 2" in finding.message
        assert all(s in finding.remedy for s in ("--set-input", "--fix-shapes", "re-export with a fixed rank"))


def test_reshape_change_read_by_a_flatten_splitting_alike_is_unified():
    """[B, 2, 4] and [B, 8] both split at axis 1 into [B, 8]."""
    m = _flag_model([node("Flatten", ["h"], ["y"], axis=1)], [out("y", FLOAT, ["B", 8])], change="Reshape")
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    for flag in (True, False):
        check_rewrite(m, NAME, {"x": x, "flag": np.array(flag)})


def test_allowzero_reshape_reader_is_unified():
    m = _flag_model([const("s", [0, 8], np.int64), node("Reshape", ["h", "s"], ["y"], allowzero=1)],
                    [out("y", FLOAT, [0, 8])])
    x = np.zeros((0, 8), np.float32)  # 0 is a length here: only an empty x reshapes to [0, 8]
    for flag in (True, False):
        check_rewrite(m, NAME, {"x": x, "flag": np.array(flag)})


def test_unread_output_is_unified():
    """TensorRT adds an output layer for every If output, read or not."""
    then = helper.make_graph([const("ax", [0], np.int64), node("Unsqueeze", ["x", "ax"], ["xu"]), node("Neg", ["x"], ["a"])],
                             "then", [], [vi("xu", FLOAT, [1, 4]), vi("a", FLOAT, [4])])
    other = helper.make_graph([node("Identity", ["x"], ["xi"]), node("Abs", ["x"], ["b"])], "else", [],
                              [vi("xi", FLOAT, [4]), vi("b", FLOAT, [4])])
    m = model([node("If", ["flag"], ["unused", "y"], name="/If", then_branch=then, else_branch=other)],
              [inp("x", FLOAT, [4]), inp("flag", BOOL, [])], [out("y", FLOAT, [4])], opset=17)
    for flag in (True, False):
        result = check_rewrite(m, NAME, {"x": np.array([-1, 2, -3, 4], np.float32), "flag": np.array(flag)})
    assert _rank_differences(result.model) == []


# ------------------------------------------------------------------------------------ bodies
def _flag_feeds(wrapped: bool, flag: bool) -> dict[str, np.ndarray]:
    feeds = {"x": np.random.default_rng(3).standard_normal((3, 8)).astype(np.float32), "unbatched": np.array(flag)}
    return {**feeds, CONDITION: np.array(True)} if wrapped else feeds


@pytest.mark.parametrize("wrap", [wrapped_in_loop, wrapped_in_if], ids=["loop_body", "if_branch"])
def test_inside_bodies(wrap):
    m = wrap(FIXTURES["unsqueeze_on_flag_flatten"].build())
    assert matches(m, NAME, "8.5", bodies=True)
    for flag in (True, False):
        result = check_rewrite(m, NAME, _flag_feeds(wrap is wrapped_in_if, flag), expect_rewrite=False)
        assert result.rewritten >= 1
    assert matches(result.model, NAME, "8.5", bodies=True) == []
    assert _rank_differences(result.model) == []
    strictly_inferred(result.model)
    fixed = graphfix.fix(m, passes="auto", trt="8.5", input_shapes={"x": (3, 8)})
    assert fixed.report.status == "ok" and not _if_findings(fixed.model, "8.5")


def test_reader_inside_a_nested_body_is_not_rewritten():
    """The If's output is read from inside a Loop body: the pass does not follow it there."""
    body = helper.make_graph(
        [node("Identity", ["cond_in"], ["cond_out"]), node("Size", ["h"], ["n"])], "body",
        [vi("i", INT64, []), vi("cond_in", BOOL, [])], [vi("cond_out", BOOL, []), vi("n", INT64, [])])
    m = _flag_model([const("trips", 1, np.int64), node("Loop", ["trips", ""], ["ns"], body=body)], [out("ns", INT64, [1])])
    _unchanged(m)


# ---------------------------------------------------------------- shapes, axes, dtypes (hypothesis)
_DTYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
           "int64": TensorProto.INT64}


def _flat(shape: list[int], axis: int) -> tuple[int, int]:
    return int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))


@st.composite
def _cases(draw):
    rank = draw(st.integers(1, 4))
    v = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    kind = draw(st.sampled_from(["Unsqueeze", "Squeeze", "Reshape", "Flatten"]))
    if kind == "Squeeze" and 1 not in v:
        v[draw(st.integers(0, rank - 1))] = 1
    if kind == "Flatten" and rank == 2:
        kind = "Unsqueeze"
    if kind == "Unsqueeze":
        p = draw(st.integers(-(rank + 1), rank))
        at = p + rank + 1 if p < 0 else p
        changed, params = [*v[:at], 1, *v[at:]], {"axes": [p]}
    elif kind == "Squeeze":
        i = draw(st.sampled_from([j for j, d in enumerate(v) if d == 1]))
        p = draw(st.sampled_from([i, i - rank]))
        changed, params = [d for j, d in enumerate(v) if j != i], {"axes": [p]}
    elif kind == "Flatten":
        b = draw(st.integers(0, rank))
        changed, params = list(_flat(v, b)), {"axis": b}
    else:  # a constant shape one rank up or down, with 0 (copy) and -1 entries where they fit
        at = draw(st.integers(0, rank))
        changed = [*v[:at], 1, *v[at:]] if rank == 1 or draw(st.booleans()) else [v[0] * v[1], *v[2:]]
        target = [0 if j < rank and d == v[j] and draw(st.booleans()) else d for j, d in enumerate(changed)]
        if draw(st.booleans()):
            target[draw(st.integers(0, len(target) - 1))] = -1
        params = {"shape": target}
    reader = draw(st.sampled_from(["Reshape", "Size", "Flatten"]))
    low = min(rank, len(changed))
    axis = draw(st.integers(-low, low)) if reader == "Flatten" else None
    target_shape = draw(st.sampled_from([[-1], [1, -1], [int(np.prod(v))]])) if reader == "Reshape" else None
    return dict(v=v, kind=kind, changed=changed, params=params, reader=reader, axis=axis, target=target_shape,
                dtype=draw(st.sampled_from(list(_DTYPES))), swap=draw(st.booleans()))


def _hypothesis_model(c: dict) -> onnx.ModelProto:
    elem = _DTYPES[c["dtype"]]
    x_type = INT64 if c["dtype"] == "int64" else FLOAT
    pre = [] if elem == x_type else [node("Cast", ["x"], ["xv"], to=elem)]
    v = "x" if elem == x_type else "xv"
    params = c["params"]
    if c["kind"] in ("Unsqueeze", "Squeeze"):
        change = [const("ax", params["axes"], np.int64), node(c["kind"], [v, "ax"], ["xc"])]
    elif c["kind"] == "Flatten":
        change = [node("Flatten", [v], ["xc"], axis=params["axis"])]
    else:
        change = [const("to", params["shape"], np.int64), node("Reshape", [v, "to"], ["xc"])]
    changed = helper.make_graph(change, "changed", [], [vi("xc", elem, c["changed"])])
    same = helper.make_graph([node("Identity", [v], ["xi"])], "same", [], [vi("xi", elem, c["v"])])
    then, other = (same, changed) if c["swap"] else (changed, same)
    nodes = [*pre, node("If", ["flag"], ["h"], name="/If", then_branch=then, else_branch=other)]
    if c["reader"] == "Size":
        nodes.append(node("Size", ["h"], ["y"]))
        return model(nodes, [inp("x", x_type, c["v"]), inp("flag", BOOL, [])], [out("y", INT64, [])], opset=17)
    if c["reader"] == "Reshape":
        nodes += [const("s", c["target"], np.int64), node("Reshape", ["h", "s"], ["r"])]
        dims = ["n"] * len(c["target"])
    else:
        nodes.append(node("Flatten", ["h"], ["r"], axis=c["axis"]))
        dims = ["a", "b"]
    nodes.append(node("Identity" if elem == x_type else "Cast", ["r"], ["y"], **({} if elem == x_type else {"to": x_type})))
    return model(nodes, [inp("x", x_type, c["v"]), inp("flag", BOOL, [])], [out("y", x_type, dims)], opset=17)


def _expected_rewrite(c: dict) -> bool:
    """Reshape to a constant shape and Size never depend on the rank; a Flatten does unless both
    ranks split at the same place (proven only for known shapes: not through a Reshape's -1)."""
    if c["reader"] != "Flatten":
        return True
    if c["kind"] == "Reshape" and -1 in c["params"]["shape"]:
        return False
    axis, r, r2 = c["axis"], len(c["v"]), len(c["changed"])
    on_v, on_changed = (axis + r, axis + r2) if axis < 0 else (axis, axis)
    return _flat(c["v"], on_v) == _flat(c["changed"], on_changed)


@settings(max_examples=60, deadline=None)
@given(_cases())
def test_hypothesis_shapes_axes_dtypes(c):
    m = _hypothesis_model(c)
    result = passes.get(NAME).apply(m, trt="8.5")
    assert bool(result.rewritten) == _expected_rewrite(c), (c, result.findings)
    if not result.rewritten:
        return
    assert _rank_differences(result.model) == []
    onnx.checker.check_model(result.model, full_check=True)
    if not runs_on_onnxruntime(m):  # bfloat16 Size: onnxruntime's CPU provider has no kernel
        return
    rng = np.random.default_rng(0)
    x = rng.integers(-9, 9, c["v"]) if c["dtype"] == "int64" else rng.standard_normal(c["v"]).astype(np.float32)
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        assert_outputs_match(ort_run(m, feeds), ort_run(result.model, feeds), atol=0, rtol=0)


# ----------------------------------------------------------------------------- ONNX node cases
@pytest.mark.parametrize("case", node_cases("If"), ids=lambda c: c.name)
def test_onnx_if_node_cases_pass_through_unchanged(case):
    """The node cases' branches return constants (no rank-changed copy of one tensor): nothing to
    rewrite, and the results stay the cases' expected ones."""
    try:
        to_model(to_graph(case.model), case.model)
    except Exception as exc:  # noqa: BLE001 - onnx-graphsurgeon cannot export optional types
        pytest.skip(f"onnx-graphsurgeon cannot round-trip {case.name} (optional types): {exc}")
    result = passes.get(NAME).apply(case.model)
    assert result.rewritten == 0 and result.model is case.model
    for inputs, expected in case.data_sets:
        feeds = {vi_.name: np.asarray(x) for vi_, x in zip(case.model.graph.input, inputs, strict=False)}
        try:
            got = ort_run(result.model, feeds)
        except Exception as exc:  # noqa: BLE001
            pytest.skip(f"onnxruntime cannot run {case.name}: {exc}")
        for g, e in zip(got, expected, strict=True):
            if isinstance(e, list):
                assert len(g) == len(e) and all(np.array_equal(a, b) for a, b in zip(g, e, strict=True))
            else:
                np.testing.assert_array_equal(g, e)


# ---------------------------------------------------------------- the TorchScript detector fixture
def test_scripted_detector_keeps_its_rank_findings_and_is_not_rewritten():
    """Its rank-switching Ifs are read by Unsqueeze, Shape and branch outputs: none is invariant."""
    m = onnx.load(REAL)
    assert passes.get(NAME).apply(m, trt="8.5").rewritten == 0
    for version in ("8.5", "10.1"):
        ranks = [f for f in _if_findings(m, version) if "differ in rank" in f.message]
        assert len(ranks) == 10, [f.node for f in ranks]
        assert all(f.fix_pass is None and "--set-input" in f.remedy and "re-export with a fixed rank" in f.remedy
                   for f in ranks)
        assert {f.node for f in ranks} >= {"/net16k/If", "/net16k/rnn/If", "/net8k/rnn/If_1"}


@pytest.mark.parametrize("wrap", [None, wrapped_in_loop], ids=["top_level", "loop_body"])
def test_undoing_the_rewrite_restores_the_if(wrap):
    """Verification undoes a region on its own: the If gets its branches and output back."""
    m = FIXTURES["unsqueeze_on_flag_flatten"].build()
    m = wrap(m) if wrap else m
    graph = to_graph(m)
    log = EditLog()
    assert passes.get(NAME).run_on_graph(graph, None, False, log)[1] == 1
    assert _rank_differences(to_model(graph, m)) == []
    log.rollback_to(0)
    restored = to_model(graph, m)
    assert _rank_differences(restored) == _rank_differences(m) != []
    assert sorted(_ops(restored)) == sorted(_ops(m))
    for flag in (True, False):
        feeds = _flag_feeds(False, flag)
        assert_outputs_match(ort_run(m, feeds), ort_run(restored, feeds), atol=0, rtol=0)
