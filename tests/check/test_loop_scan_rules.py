"""`graphfix check` reads Loop and Scan as the onnx-tensorrt importers do (graphfix/check/loops.py):
one small hand-made model per rule, found at the releases whose importer refuses (or mis-sizes) it
and at none of those that accept it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from fixtures.recipes._onnx import BOOL, FLOAT, INT64, init, inp, node, out
from graphfix.check.findings import check_model

ALL = ("7.0", "7.1", "7.2", "8.0", "8.2", "8.4", "8.5", "8.6", "9.0", "10.1")


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _rules(m: onnx.ModelProto, trt: str, op: str) -> set[str]:
    """The restriction findings on ``op`` nodes, by the rule's name (read back from its evidence)."""
    from graphfix.check.restrictions import RESTRICTIONS

    by_evidence = {r.evidence: r.name for r in RESTRICTIONS}
    return {by_evidence[f.evidence] for f in check_model(m, trt).findings if f.op == op and f.evidence in by_evidence}


def _at(m: onnx.ModelProto, op: str, rule: str) -> set[str]:
    return {v for v in ALL if rule in _rules(m, v, op)}


def _loop(trip: str | int | None, *, read_iteration: bool, computed_condition: bool = False, scan_output: bool = False,
          states: int = 1, grow: bool = False) -> onnx.ModelProto:
    """A Loop over ``s`` (shape [2]): trip count absent (None), a graph input ('input') or an
    initializer of that value; the body adds 1 (or the iteration number) to the carried value."""
    body_nodes = [node("Constant", [], ["one"], name="one", value=helper.make_tensor("one_v", FLOAT, [], [1.0]))]
    body_inputs = [inp("i", INT64, []), inp("c_in", BOOL, [])]
    body_outputs = [out("c_out", BOOL, [])]
    if read_iteration:
        body_nodes += [node("Cast", ["i"], ["i_f"], name="cast_i", to=FLOAT), node("Add", ["one", "i_f"], ["step"], name="step")]
    else:
        body_nodes += [node("Identity", ["one"], ["step"], name="step")]
    if computed_condition:
        body_nodes += [node("Constant", [], ["limit"], name="limit", value=helper.make_tensor("l", FLOAT, [], [5.0])),
                       node("ReduceSum", ["s_out"], ["total"], name="total", keepdims=0),
                       node("Less", ["total", "limit"], ["c_out"], name="less")]
    else:
        body_nodes += [node("Identity", ["c_in"], ["c_out"], name="pass_cond")]
    outer_states = []
    if states:
        body_inputs.append(inp("s_in", FLOAT, [2]))
        if grow:
            body_nodes += [node("Unsqueeze", ["step"], ["step1"], name="unsq", axes=[0]),
                           node("Concat", ["s_in", "step1"], ["s_out"], name="grow", axis=0)]
            body_outputs.append(out("s_out", FLOAT, ["n"]))
        else:
            body_nodes += [node("Add", ["s_in", "step"], ["s_out"], name="add")]
            body_outputs.append(out("s_out", FLOAT, [2]))
        outer_states = ["s"]
    elif computed_condition:
        body_nodes += [node("Identity", ["step"], ["s_out"], name="s_out_id")]
    if scan_output:
        body_nodes += [node("Identity", ["step"], ["per_step"], name="per_step")]
        body_outputs.append(out("per_step", FLOAT, []))
    body = helper.make_graph(body_nodes, "body", body_inputs, body_outputs)
    inits = [init("cond", np.array(True))]
    inputs = [inp("s", FLOAT, [2])]
    if trip is None:
        trip_name = ""
    elif trip == "input":
        trip_name = "m"
        inputs.append(inp("m", INT64, []))
    else:
        trip_name = "m"
        inits.append(init("m", np.array(trip, np.int64)))
    outputs = [out("y", FLOAT, ["n"] if grow else [2])] if states else []
    if scan_output:
        outputs.append(out("ys", FLOAT, ["k"]))
    loop = node("Loop", [trip_name, "cond", *outer_states], [o.name for o in outputs], name="the_loop", body=body)
    return _model([loop], inputs, outputs, inits)


# --------------------------------------------------------------------------------------- iteration number
def test_the_iteration_number_without_a_trip_count_is_refused_everywhere():
    """importLoop registers the iteration number only inside 'if (inputs[0])' (7.0..main)."""
    m = _loop(None, read_iteration=True, computed_condition=True)
    assert _at(m, "Loop", "loop-iteration-without-trip-count") == set(ALL)
    assert _at(_loop(None, read_iteration=False, computed_condition=True), "Loop", "loop-iteration-without-trip-count") == set()


def test_the_iteration_number_with_an_int_max_trip_count_is_refused_from_8_5():
    """8.5-GA's isMaxTripCount drops the trip limit and the counter; 8.0-8.4 keep it as a count."""
    m = _loop(2**63 - 1, read_iteration=True, computed_condition=True)
    assert _at(m, "Loop", "loop-iteration-max-trip-count") == {"8.5", "8.6", "9.0", "10.1"}
    assert _at(_loop(2**31 - 1, read_iteration=True), "Loop", "loop-iteration-max-trip-count") == {"8.5", "8.6", "9.0", "10.1"}
    assert _at(_loop(2**31 - 2, read_iteration=True), "Loop", "loop-iteration-max-trip-count") == set()
    assert _at(_loop("input", read_iteration=True), "Loop", "loop-iteration-max-trip-count") == set()  # not weights


def test_7_1_never_registers_the_iteration_number_and_7_0_gives_the_trip_count():
    m = _loop(3, read_iteration=True)
    assert _at(m, "Loop", "loop-iteration-unregistered") == {"7.1"}
    assert _at(m, "Loop", "loop-iteration-is-trip-count") == {"7.0"}
    assert _at(_loop(3, read_iteration=False), "Loop", "loop-iteration-unregistered") == set()


def test_an_iteration_number_read_only_inside_a_nested_body_counts():
    """The iteration number used by an If inside the body (outer-scope name) is still read."""
    then = helper.make_graph([node("Cast", ["i"], ["t"], name="cast_in_then", to=FLOAT)], "then", [], [out("t", FLOAT, [])])
    other = helper.make_graph([node("Identity", ["one"], ["e"], name="else_id")], "else", [], [out("e", FLOAT, [])])
    body = helper.make_graph(
        [node("Constant", [], ["one"], name="one", value=helper.make_tensor("one_v", FLOAT, [], [1.0])),
         node("If", ["c_in"], ["step"], name="inner_if", then_branch=then, else_branch=other),
         node("Add", ["s_in", "step"], ["s_out"], name="add"), node("Identity", ["c_in"], ["c_out"], name="pass_cond")],
        "body", [inp("i", INT64, []), inp("c_in", BOOL, []), inp("s_in", FLOAT, [2])],
        [out("c_out", BOOL, []), out("s_out", FLOAT, [2])])
    m = _model([node("Loop", ["", "cond", "s"], ["y"], name="the_loop", body=body)], [inp("s", FLOAT, [2]), inp("cond", BOOL, [])],
               [out("y", FLOAT, [2])])
    assert "loop-iteration-without-trip-count" in _rules(m, "8.6", "Loop")


# ------------------------------------------------------------------------------------------- condition
def test_releases_before_8_0_ignore_the_condition_the_body_computes():
    """7.0-7.2.1 put the kWHILE trip limit on the Loop's condition input; 8.0-GA reads body.output(0)."""
    m = _loop(10, read_iteration=False, computed_condition=True)
    assert _at(m, "Loop", "loop-condition-ignored") == {"7.0", "7.1", "7.2"}
    assert _at(_loop(10, read_iteration=False), "Loop", "loop-condition-ignored") == set()  # passed on unchanged


def test_a_body_reading_its_condition_without_a_condition_input_is_refused_everywhere():
    """importLoop registers the body's condition input only inside 'if (inputs[1])' (7.0..main)."""
    m = _loop(3, read_iteration=False)
    m.graph.node[0].input[1] = ""  # a for-loop without a condition; the body still passes it on (Identity)
    assert _at(m, "Loop", "loop-condition-unregistered") == set(ALL)
    assert _at(_loop(3, read_iteration=False), "Loop", "loop-condition-unregistered") == set()
    body = next(a.g for a in m.graph.node[0].attribute if a.name == "body")
    passed = next(n for n in body.node if n.name == "pass_cond")
    passed.input[0] = "one_b"  # the body's condition no longer reads its condition input
    body.node.insert(0, node("Constant", [], ["one_b"], name="true", value=helper.make_tensor("t", BOOL, [], [True])))
    assert _at(m, "Loop", "loop-condition-unregistered") == set()


# ---------------------------------------------------------------------------------------- scan outputs
def test_scan_outputs_without_a_trip_count_get_a_dummy_length_everywhere():
    m = _loop(None, read_iteration=False, computed_condition=True, scan_output=True)
    assert _at(m, "Loop", "loop-scan-output-unsized") == set(ALL)
    found = [f for f in check_model(m, "8.6").findings if "1024" in f.message]
    assert [(f.severity, f.rule) for f in found] == [("warning", "wrong-results")]


def test_scan_outputs_with_an_int_max_trip_count():
    """8.5-GA on: no trip limit, dummy length 1024; before: the trip count (clamped to INT32_MAX)."""
    m = _loop(2**63 - 1, read_iteration=False, computed_condition=True, scan_output=True)
    assert _at(m, "Loop", "loop-scan-output-max-trip-count") == {"8.5", "8.6", "9.0", "10.1"}
    assert _at(m, "Loop", "loop-scan-output-int-max") == {"7.0", "7.1", "7.2", "8.0", "8.2", "8.4"}


def test_scan_outputs_of_a_loop_its_condition_can_end_early_are_an_uncertain_warning():
    m = _loop(10, read_iteration=False, computed_condition=True, scan_output=True)
    assert _at(m, "Loop", "loop-scan-output-early-exit") == {"8.0", "8.2", "8.4", "8.5", "8.6", "9.0", "10.1"}
    found = [f for f in check_model(m, "10.1").findings if f.op == "Loop"]
    assert [(f.severity, f.certain) for f in found] == [("warning", False)]
    # a for-loop (condition passed on) with a trip count: the length is right everywhere
    assert not any("scan output" in f.message for v in ALL for f in check_model(_loop(10, read_iteration=False, scan_output=True), v)
                   .findings)


def _trip_from(source: str) -> onnx.ModelProto:
    """A for-loop with a scan output whose trip count is computed: from the values of ``v``
    ('data': ReduceMax of a float input) or from its shape ('shape')."""
    m = _loop(5, read_iteration=False, scan_output=True)
    m.graph.initializer.remove(next(t for t in m.graph.initializer if t.name == "m"))
    m.graph.input.append(inp("v", FLOAT, ["L"]))
    if source == "data":
        made = [node("ReduceMax", ["v"], ["v_max"], name="vmax", keepdims=0), node("Cast", ["v_max"], ["m"], name="to_count", to=INT64)]
    else:
        made = [node("Shape", ["v"], ["v_shape"], name="vshape"), node("ReduceMax", ["v_shape"], ["m"], name="vlen", keepdims=0)]
    nodes = [*made, *m.graph.node]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def test_a_scan_output_length_computed_from_data_is_refused():
    """The length of a kCONCATENATE loop output must be a 0D shape tensor (ILoopOutputLayer)."""
    m = _trip_from("data")
    assert _at(m, "Loop", "loop-scan-output-length-from-data") == set(ALL)
    found = next(f for f in check_model(m, "8.6").findings if f.op == "Loop")
    assert found.severity == "blocking" and "ReduceMax 'vmax'" in found.message
    assert _at(_trip_from("shape"), "Loop", "loop-scan-output-length-from-data") == set()


# ----------------------------------------------------------------------------------- carried values
def test_a_carried_value_that_grows_is_refused_everywhere():
    m = _loop(3, read_iteration=False, grow=True)
    assert _at(m, "Loop", "loop-carried-shape") == set(ALL)
    found = [f for f in check_model(m, "10.1").findings if f.op == "Loop"]
    assert [(f.severity, f.error_id) for f in found] == [("blocking", "loop-carried-shape-changes")]
    assert "IRecurrenceLayer" in (found[0].error_text or "") and "preallocate" in found[0].upstream
    assert _at(_loop(3, read_iteration=False), "Loop", "loop-carried-shape") == set()


def test_a_carried_value_of_another_rank_is_refused():
    body = helper.make_graph([node("Unsqueeze", ["s_in"], ["s_out"], name="unsq", axes=[0]),
                              node("Identity", ["c_in"], ["c_out"], name="pass_cond")], "body",
                             [inp("i", INT64, []), inp("c_in", BOOL, []), inp("s_in", FLOAT, [2])],
                             [out("c_out", BOOL, []), out("s_out", FLOAT, [1, 2])])
    m = _model([node("Loop", ["m", "cond", "s"], ["y"], name="the_loop", body=body)], [inp("s", FLOAT, [2])],
               [out("y", FLOAT, None)], [init("m", np.array(1, np.int64)), init("cond", np.array(True))])
    assert "rank 1" in next(f.message for f in check_model(m, "8.5").findings if f.op == "Loop")


def test_loop_without_carried_value_aborts_7_1_only():
    m = _loop(3, read_iteration=False, states=0, scan_output=True)
    assert _at(m, "Loop", "loop-without-state") == {"7.1"}


# ----------------------------------------------------------------------------------------------- Scan
def _scan(states: int = 1, input_axis: int = 0, output_axis: int = 0, opset: int = 13) -> onnx.ModelProto:
    """Scan over the rows of x [3, 2]: carried sum (if ``states``) and each row doubled."""
    body_nodes = [node("Add", ["x_row", "x_row"], ["doubled"], name="double")]
    body_inputs, body_outputs = [inp("x_row", FLOAT, [2])], [out("doubled", FLOAT, [2])]
    scan_inputs, outputs = ["x"], [out("ys", FLOAT, None)]
    if states:
        body_nodes.append(node("Add", ["acc_in", "x_row"], ["acc_out"], name="acc"))
        body_inputs.insert(0, inp("acc_in", FLOAT, [2]))
        body_outputs.insert(0, out("acc_out", FLOAT, [2]))
        scan_inputs.insert(0, "acc0")
        outputs.insert(0, out("acc", FLOAT, [2]))
    body = helper.make_graph(body_nodes, "body", body_inputs, body_outputs)
    scan = node("Scan", scan_inputs, [o.name for o in outputs], name="the_scan", body=body, num_scan_inputs=1,
                scan_input_axes=[input_axis], scan_output_axes=[output_axis])
    return _model([scan], [inp("x", FLOAT, [3, 2])], outputs, [init("acc0", np.zeros(2, np.float32))], opset=opset)


def _normalized_at(m: onnx.ModelProto, says: str) -> set[str]:
    """The releases at which the Scan's finding is scan-normalize's (the pass rewrites both forms)."""
    return {v for v in ALL for f in check_model(m, v).findings
            if f.op == "Scan" and f.fix_pass == "scan-normalize" and f.severity == "blocking" and says in f.message}


def test_a_scan_without_state_variables_is_refused_from_7_1():
    """registerLayer(stateVars.at(0), ...) in importScan from 7.1 (7.0 has none)."""
    assert _normalized_at(_scan(states=0), "no state variable") == set(ALL) - {"7.0"}
    assert _normalized_at(_scan(states=1), "no state variable") == set()
    assert [f for f in check_model(_scan(), "10.1").findings if f.op == "Scan" and f.severity == "blocking"] == []


def test_negative_scan_axes_are_refused_everywhere():
    """convertAxis(axis, Dims::MAX_DIMS) in importScan, 7.0..main."""
    assert _normalized_at(_scan(input_axis=-2), "negative scan axes") == set(ALL)
    assert _normalized_at(_scan(output_axis=-1), "negative scan axes") == set(ALL)
    assert _normalized_at(_scan(input_axis=0, output_axis=1), "negative scan axes") == set()


def test_a_scan_state_that_changes_shape_is_refused():
    body = helper.make_graph([node("Concat", ["acc_in", "x_row"], ["acc_out"], name="grow", axis=0),
                              node("Identity", ["x_row"], ["y_row"], name="y_row")], "body",
                             [inp("acc_in", FLOAT, ["n"]), inp("x_row", FLOAT, [2])],
                             [out("acc_out", FLOAT, ["m"]), out("y_row", FLOAT, [2])])
    m = _model([node("Scan", ["acc0", "x"], ["acc", "ys"], name="the_scan", body=body, num_scan_inputs=1)],
               [inp("x", FLOAT, [3, 2])], [out("acc", FLOAT, None), out("ys", FLOAT, [3, 2])],
               [init("acc0", np.zeros(2, np.float32))])
    assert _at(m, "Scan", "loop-carried-shape") == set(ALL)


def test_a_loop_inside_an_if_branch_is_reported_with_its_path():
    loop_model = _loop(None, read_iteration=True, computed_condition=True)
    then = helper.make_graph(list(loop_model.graph.node), "then", [], [out("y", FLOAT, [2])])
    other = helper.make_graph([node("Identity", ["s"], ["e"], name="else_id")], "else", [], [out("e", FLOAT, [2])])
    m = _model([node("If", ["gate"], ["z"], name="gate_if", then_branch=then, else_branch=other)],
               [inp("s", FLOAT, [2]), inp("gate", BOOL, [])], [out("z", FLOAT, [2])], list(loop_model.graph.initializer))
    found = [f for f in check_model(m, "8.6").findings if f.op == "Loop"]
    assert [f.path for f in found] == [["gate_if", "the_loop"]]


def _scan8(sequence_lens: bool, opset: int = 8) -> onnx.ModelProto:
    """Scan-8 over x [1, 3, 2] (batch 1, sequence 3): a carried sum, with or without sequence_lens."""
    body = helper.make_graph([node("Add", ["acc_in", "x_row"], ["acc_out"], name="acc"),
                              node("Identity", ["x_row"], ["y_row"], name="y_row")], "body",
                             [inp("acc_in", FLOAT, [2]), inp("x_row", FLOAT, [2])],
                             [out("acc_out", FLOAT, [2]), out("y_row", FLOAT, [2])])
    inputs = [inp("x", FLOAT, [1, 3, 2])] + ([inp("lens", INT64, [1])] if sequence_lens else [])
    scan = node("Scan", ["lens" if sequence_lens else "", "acc0", "x"], ["acc", "ys"], name="the_scan", body=body,
                num_scan_inputs=1)
    return _model([scan], inputs, [out("acc", FLOAT, [1, 2]), out("ys", FLOAT, [1, 3, 2])],
                  [init("acc0", np.zeros((1, 2), np.float32))], opset=opset)


def test_a_scan_8_sequence_lens_is_refused_everywhere():
    """importScan, 7.0..main: ASSERT(inputs.at(0).isNullTensor()) at model opset 8."""
    assert _at(_scan8(sequence_lens=True), "Scan", "scan-sequence-lens") == set(ALL)
    assert _at(_scan8(sequence_lens=False), "Scan", "scan-sequence-lens") == set()
    assert _rules(_scan(opset=9), "10.1", "Scan") == set()  # Scan-9's first input is a state
