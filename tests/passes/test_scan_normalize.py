"""scan-normalize: fixtures, the official ONNX Scan node cases written with negative axes,
version boundaries, undo, random Scans (states, axes, directions)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "scan_normalize"}


def _scan_node(m: onnx.ModelProto) -> onnx.NodeProto:
    return next(n for n in m.graph.node if n.op_type == "Scan")


def _attrs(n: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in n.attribute if a.type != onnx.AttributeProto.GRAPH}


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "scan-normalize")
    scan = _scan_node(result.model)
    assert all(a >= 0 for k, v in _attrs(scan).items() if k.endswith("_axes") for a in v)
    assert len(scan.input) > _attrs(scan)["num_scan_inputs"]  # a state variable
    for version in ("7.1", "8.0", "8.6", "10.1"):
        assert not [f for f in check_model(result.model, version).findings if f.op == "Scan" and f.severity == "blocking"]


@pytest.mark.parametrize("version,rewrites", [("7.0", False), ("7.1", True), ("8.5", True), ("10.1", True), ("11.1", True)])
def test_a_scan_without_state_is_rewritten_from_7_1(version, rewrites):
    result = passes.get("scan-normalize").apply(FIXTURES["map_rows_no_state"].build(), trt=version)
    assert (result.rewritten > 0) == rewrites


def test_negative_axes_are_rewritten_at_every_release():
    for version in ("7.0", "8.2", "10.1"):
        assert passes.get("scan-normalize").apply(FIXTURES["cumulative_last_axis_reversed"].build(), trt=version).rewritten


def test_check_names_the_pass_for_both_forms():
    for fx in FIXTURES.values():
        found = [f for f in check_model(fx.build(), "8.6").findings if f.op == "Scan"]
        assert [(f.severity, f.fix_pass) for f in found] == [("blocking", "scan-normalize")], fx.name
        assert "DEFINE_BUILTIN_OP_IMPORTER(Scan)" in found[0].evidence and "10.1-GA" in found[0].evidence


def test_a_negative_axis_of_unknown_rank_is_left_as_a_finding():
    unranked = helper.make_tensor_value_info
    body = helper.make_graph([node("Add", ["acc_in", "row"], ["acc_out"], name="acc"), node("Identity", ["row"], ["row_out"])],
                             "body", [inp("acc_in", FLOAT, [1]), unranked("row", FLOAT, None)],
                             [out("acc_out", FLOAT, [1]), unranked("row_out", FLOAT, None)])
    graph = helper.make_graph([node("Scan", ["acc0", "x"], ["acc", "y"], name="s", body=body, num_scan_inputs=1,
                                    scan_input_axes=[-1])], "m", [unranked("x", FLOAT, None)],
                              [out("acc", FLOAT, [1]), unranked("y", FLOAT, None)],
                              [onnx.numpy_helper.from_array(np.zeros(1, np.float32), "acc0")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    result = passes.get("scan-normalize").apply(m, trt="8.6")
    assert result.rewritten == 0 and "rank" in result.findings[0].message


# ----------------------------------------------------------------------- official ONNX Scan node cases
def _with_negative_axes(m: onnx.ModelProto) -> onnx.ModelProto:
    """The case's Scan with each axis (all 0 there) written as 0 - rank."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    scan = m2.graph.node[0]
    body = next(a.g for a in scan.attribute if a.name == "body")
    states = len(scan.input) - _attrs(scan)["num_scan_inputs"]
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in m2.graph.input}
    scan.attribute.extend([
        helper.make_attribute("scan_input_axes", [-ranks[name] for name in scan.input[states:]]),
        helper.make_attribute("scan_output_axes", [-(len(o.type.tensor_type.shape.dim) + 1) for o in body.output[states:]]),
    ])
    return m2


@pytest.mark.parametrize("case", [c for c in node_cases("Scan") if c.model.opset_import[0].version >= 9], ids=lambda c: c.name)
def test_onnx_node_cases_with_negative_axes(case):
    m = _with_negative_axes(runnable(case.model, 11))  # negative axes: opset 11
    for imp in m.opset_import:
        imp.version = max(imp.version, 11)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        np.testing.assert_allclose(ort_run(m, feeds)[-1], expected[-1], rtol=1e-6)  # the variant means the same
        result = check_rewrite(m, "scan-normalize", feeds)
        assert all(a >= 0 for k, v in _attrs(_scan_node(result.model)).items() if k.endswith("_axes") for a in v)
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("case", [c for c in node_cases("Scan")], ids=lambda c: c.name)
def test_onnx_node_cases_as_written_are_left_alone(case):
    """Every case carries a state and non-negative axes (and scan_sum is Scan-8): nothing to do."""
    assert passes.get("scan-normalize").apply(runnable(case.model, 9)).rewritten == 0


# --------------------------------------------------------------------------------------- undo
def test_undo_restores_the_scan_and_its_body():
    from graphfix.graph import to_graph
    from graphfix.graph.edits import EditLog
    from graphfix.trt.versions import TrtVersion

    graph = to_graph(FIXTURES["map_rows_no_state"].build())
    scan = next(n for n in graph.nodes if n.op == "Scan")
    body, inputs, outputs = scan.attrs["body"], list(scan.inputs), list(scan.outputs)
    body_ends = (list(body.inputs), list(body.outputs), list(body.nodes))
    log = EditLog()
    assert passes.get("scan-normalize").run_on_graph(graph, TrtVersion("8.6"), log=log)[1] == 1
    assert scan.attrs["body"] is not body and len(scan.inputs) == 2
    log.rollback_to(0)
    assert scan.attrs["body"] is body and list(scan.inputs) == inputs and list(scan.outputs) == outputs
    assert (list(body.inputs), list(body.outputs), list(body.nodes)) == body_ends


# ------------------------------------------------------------------------------------- random Scans
@st.composite
def scans(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    out_axis = draw(st.integers(-rank, rank - 1))  # body output rank is rank - 1: the Scan output's is rank
    return (shape, axis, draw(st.integers(0, 1)), out_axis, draw(st.integers(0, 1)), draw(st.booleans()),
            draw(st.integers(0, 2**31)))


def _random_scan(shape, axis, in_dir, out_axis, out_dir, stateful):
    rank = len(shape)
    step = [d for k, d in enumerate(shape) if k != axis % rank]
    nodes = [node("Mul", ["row", "row"], ["sq"], name="sq")]
    b_in, b_out, s_in, s_out = [inp("row", FLOAT, step)], [out("sq", FLOAT, step)], ["x"], [out("y", FLOAT, None)]
    inits = []
    if stateful:
        nodes.append(node("Add", ["acc_in", "row"], ["acc_out"], name="acc"))
        b_in.insert(0, inp("acc_in", FLOAT, step))
        b_out.insert(0, out("acc_out", FLOAT, step))
        s_in.insert(0, "acc0")
        s_out.insert(0, out("acc", FLOAT, step))
        inits.append(onnx.numpy_helper.from_array(np.zeros(step, np.float32), "acc0"))
    body = helper.make_graph(nodes, "body", b_in, b_out)
    out_shape = list(step)
    out_shape.insert(out_axis % rank, shape[axis % rank])
    s_out[-1] = out("y", FLOAT, out_shape)
    scan = node("Scan", s_in, [o.name for o in s_out], name="s", body=body, num_scan_inputs=1, scan_input_axes=[axis],
                scan_input_directions=[in_dir], scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    return model([scan], [inp("x", FLOAT, shape)], s_out, inits, opset=17)


@settings(max_examples=30, deadline=None)
@given(scans())
def test_random_scans_keep_their_outputs(case):
    shape, axis, in_dir, out_axis, out_dir, stateful, seed = case
    m = _random_scan(shape, axis, in_dir, out_axis, out_dir, stateful)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    needed = not stateful or axis < 0 or out_axis < 0
    result = check_rewrite(m, "scan-normalize", {"x": x}, expect_rewrite=needed)
    assert (result.rewritten > 0) == needed
