"""`graphfix check` knows the parser rules no pass rewrites (graphfix/check/restrictions.py):
Q/DQ zero points, UINT8 and scales, Resize tf_half_pixel_for_nn rounding, If branches that
differ in shape under a runtime condition; each finding names what to change in the export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from fixtures.recipes._onnx import BOOL, FLOAT, init, inp, model, node, out
from graphfix.check.findings import check_model
from graphfix.check.restrictions import RESTRICTIONS
from graphfix.cli.main import main


def _findings(m: onnx.ModelProto, trt: str, op: str) -> list:
    return [f for f in check_model(m, trt).findings if f.op == op]


def _severities(m: onnx.ModelProto, trt: str, op: str) -> set[tuple[str, str]]:
    return {(f.severity, f.rule) for f in _findings(m, trt, op)}


# ---------------------------------------------------------------- QuantizeLinear / DequantizeLinear
def _qdq(zero_point: int | None, dtype: type = np.int8, scale: float = 0.1) -> onnx.ModelProto:
    inits = [init("scale", np.float32(scale))]
    names = ["x", "scale"]
    if zero_point is not None:
        inits.append(init("zero_point", np.array(zero_point, dtype)))
        names.append("zero_point")
    return model([node("QuantizeLinear", names, ["q"], name="q"), node("DequantizeLinear", ["q", *names[1:]], ["y"], name="dq")],
                 [inp("x", FLOAT, [1, 4])], [out("y", FLOAT, [1, 4])], inits, opset=13)


@pytest.mark.parametrize("trt", ["8.0", "8.6", "9.1", "9.3", "10.1", "10.8"])
def test_a_nonzero_zero_point_blocks_and_zero_passes(trt):
    for op in ("QuantizeLinear", "DequantizeLinear"):
        found = _findings(_qdq(3), trt, op)
        assert [(f.severity, f.rule) for f in found] == [("blocking", "outside-limits")], (trt, op, found)
        assert "symmetric" in found[0].message and "(3)" in found[0].message
        assert "TensorRT source" not in found[0].evidence and "shiftIsAllZeros" in found[0].evidence
        assert found[0].fix_pass is None and "QuantFormat.QDQ" in found[0].upstream
        assert _findings(_qdq(0), trt, op) == []


@pytest.mark.parametrize("trt", ["9.0", "9.2"])
def test_at_9_0_and_9_2_a_quantize_zero_point_is_dropped_not_refused(trt):
    assert _severities(_qdq(3), trt, "QuantizeLinear") == {("warning", "wrong-results")}
    assert _severities(_qdq(3), trt, "DequantizeLinear") == {("blocking", "outside-limits")}


@pytest.mark.parametrize("trt", ["8.5", "8.6", "9.1", "10.1"])
def test_uint8_quantization_is_refused_from_8_5(trt):
    found = _findings(_qdq(128, np.uint8), trt, "QuantizeLinear")  # zero point 128: qdq-uint8-to-int8 rewrites it exactly
    assert [(f.severity, f.rule, f.fix_pass) for f in found] == [("blocking", "unsupported-type", "qdq-uint8-to-int8")]
    assert "UINT8" in found[0].message
    found = _findings(_qdq(100, np.uint8), trt, "QuantizeLinear")  # another zero point: no exact rewrite, the remedy
    assert {(f.severity, f.rule) for f in found} == {("blocking", "unsupported-type"), ("blocking", "outside-limits")}
    assert all(f.fix_pass is None and f.upstream for f in found)
    # a symmetric UINT8 pair is still refused, once, on the QuantizeLinear that writes UINT8
    assert _severities(_qdq(0, np.uint8), trt, "QuantizeLinear") == {("blocking", "unsupported-type")}
    assert _findings(_qdq(0, np.uint8), trt, "DequantizeLinear") == []


def test_uint8_before_8_5_is_computed_as_int8():
    found = _findings(_qdq(0, np.uint8), "8.4", "QuantizeLinear")
    assert [(f.severity, f.rule) for f in found] == [("warning", "wrong-results")]
    assert "saturate" in found[0].message


def test_a_uint8_dequantize_of_weights_is_refused():
    m = model([node("DequantizeLinear", ["w", "scale", "zero_point"], ["y"], name="dq")], [], [out("y", FLOAT, [4])],
              [init("w", np.array([1, 2, 3, 200], np.uint8)), init("scale", np.float32(0.5)), init("zero_point", np.uint8(0))],
              opset=13)
    found = _findings(m, "8.6", "DequantizeLinear")
    assert [(f.severity, f.rule) for f in found] == [("blocking", "unsupported-type")]
    assert "'w' is UINT8" in found[0].message


def test_a_missing_zero_point_is_refused_before_8_6_and_means_uint8_from_9_0():
    assert _severities(_qdq(None), "8.4", "QuantizeLinear") == {("blocking", "outside-limits")}
    assert _severities(_qdq(None), "8.4", "DequantizeLinear") == {("blocking", "outside-limits")}
    found = _findings(_qdq(None), "10.1", "QuantizeLinear")
    assert [(f.severity, f.rule) for f in found] == [("warning", "wrong-results")] and "UINT8" in found[0].message


@pytest.mark.parametrize("trt", ["8.0", "8.6", "10.1"])
def test_a_scale_that_is_not_positive_blocks(trt):
    found = _findings(_qdq(0, scale=-0.1), trt, "DequantizeLinear")
    assert [(f.severity, f.rule) for f in found] == [("blocking", "outside-limits")]
    assert "positive" in found[0].message


# ---------------------------------------------------------------------------------------- Resize
def _resize(nearest_mode: str, mode: str = "nearest") -> onnx.ModelProto:
    return model([node("Resize", ["x", "", "scales"], ["y"], name="resize", mode=mode, nearest_mode=nearest_mode,
                       coordinate_transformation_mode="tf_half_pixel_for_nn")],
                 [inp("x", FLOAT, [1, 1, 4, 4])], [out("y", FLOAT, [1, 1, 8, 8])],
                 [init("scales", np.array([1, 1, 2, 2], np.float32))], opset=13)


@pytest.mark.parametrize("trt", ["8.0", "8.6", "9.0", "10.0", "10.1", "10.8"])
def test_tf2onnx_nearest_resize_with_floor_blocks(trt):
    found = _findings(_resize("floor"), trt, "Resize")
    assert [(f.severity, f.rule, f.fix_pass) for f in found] == [("blocking", "outside-limits", "resize-nearest-mode")], found
    assert "tf_half_pixel_for_nn" in found[0].message and "round_prefer_floor" in found[0].message
    assert "round_prefer_floor nearest mode in tf_half_pixel_for_nn" in (found[0].error_text or "")
    assert _findings(_resize("round_prefer_floor"), trt, "Resize") == []


def test_9_1_to_9_3_accept_it_and_round_differently():
    (found,) = _findings(_resize("floor"), "9.2", "Resize")
    assert (found.rule, found.fix_pass) == ("wrong-results", "resize-nearest-mode")


# -------------------------------------------------------------------------------------------- If
def _branches(then_shape: list, else_shape: list, prefix: str = "") -> tuple[onnx.GraphProto, onnx.GraphProto]:
    """then: Identity(x) of x's shape [2, 3]; else: x flattened to [6] (or reshaped to ``else_shape``)."""
    then = helper.make_graph([node("Identity", ["x"], [f"{prefix}t"], name=f"{prefix}then_id")], f"{prefix}then", [],
                             [out(f"{prefix}t", FLOAT, then_shape)])
    other = helper.make_graph([node("Reshape", ["x", f"{prefix}target"], [f"{prefix}e"], name=f"{prefix}else_reshape")],
                              f"{prefix}else", [], [out(f"{prefix}e", FLOAT, else_shape)],
                              [init(f"{prefix}target", np.array(else_shape, np.int64))])
    return then, other


def _if(condition: str, then_shape: list | None = None, else_shape: list | None = None) -> onnx.ModelProto:
    """An If on ``condition`` ('input': a graph input; 'constant': an initializer)."""
    then, other = _branches(then_shape or [2, 3], else_shape or [6])
    inputs, inits = [inp("x", FLOAT, [2, 3])], []
    if condition == "input":
        inputs.append(inp("c", BOOL, []))
    else:
        inits.append(init("c", np.bool_(True)))
    graph = helper.make_graph([node("If", ["c"], ["y"], name="the_if", then_branch=then, else_branch=other)], "m",
                              inputs, [out("y", FLOAT, ["a", "b"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("trt", ["8.0", "8.6", "10.1"])
def test_if_branches_of_different_rank_block_under_a_runtime_condition(trt):
    found = _findings(_if("input"), trt, "If")
    assert [(f.severity, f.rule) for f in found] == [("blocking", "outside-limits")], found
    assert "rank 2" in found[0].message and "rank 1" in found[0].message
    assert "IIfConditionalOutputLayer" in (found[0].error_text or "")
    assert found[0].fix_pass is None and "same rank" in found[0].upstream and "re-export with a fixed rank" in found[0].upstream
    assert _findings(_if("constant"), trt, "If") == []  # the importer inlines an initializer condition


def test_if_branches_of_different_static_dims_block_from_8_2():
    m = _if("input", [1, 6], [6, 1])
    assert _severities(m, "8.6", "If") == {("blocking", "outside-limits")}
    assert "[1, 6]" in _findings(m, "8.6", "If")[0].message
    assert _findings(m, "8.0", "If") == []  # 8.0 selects between the branches with broadcasting


def _placeholder_if() -> onnx.ModelProto:
    """optimum's merged decoder in small: the then branch returns an empty [0, 3] placeholder, the
    else branch x of shape [n, 3]."""
    then = helper.make_graph([node("Identity", ["empty"], ["t"], name="then_id")], "then", [], [out("t", FLOAT, [0, 3])],
                             [init("empty", np.zeros((0, 3), np.float32))])
    other = helper.make_graph([node("Identity", ["x"], ["e"], name="else_id")], "else", [], [out("e", FLOAT, ["n", 3])])
    graph = helper.make_graph([node("If", ["c"], ["y"], name="the_if", then_branch=then, else_branch=other)], "m",
                              [inp("x", FLOAT, ["n", 3]), inp("c", BOOL, [])], [out("y", FLOAT, ["m", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("trt", ["8.2", "8.5", "10.1"])
def test_a_static_dim_against_a_dynamic_one_in_if_branches_warns_from_8_2(trt):
    found = _findings(_placeholder_if(), trt, "If")
    assert [(f.severity, f.certain) for f in found] == [("warning", False)], found
    assert "[0, 3]" in found[0].message and "['n', 3]" in found[0].message
    assert "--set-input" in found[0].upstream and "IIfConditionalOutputLayer" in (found[0].error_text or "")
    assert _findings(_placeholder_if(), "8.0", "If") == []


def test_if_branches_of_one_shape_or_only_symbolic_dims_give_no_finding():
    assert _findings(_if("input", [2, 3], [2, 3]), "8.6", "If") == []
    m = _placeholder_if()  # then: w of shape [p, 3]
    then = next(a.g for a in m.graph.node[0].attribute if a.name == "then_branch")
    then.ClearField("initializer")
    then.node[0].input[0] = "w"
    then.output[0].CopyFrom(out("t", FLOAT, ["p", 3]))
    m.graph.input.append(inp("w", FLOAT, ["p", 3]))
    assert _findings(m, "8.6", "If") == []


def test_an_if_inside_a_branch_is_reported_with_its_path():
    inner_then, inner_else = _branches([2, 3], [6], prefix="inner_")
    outer_then = helper.make_graph([node("If", ["c"], ["o_t"], name="inner_if", then_branch=inner_then, else_branch=inner_else)],
                                   "outer_then", [], [out("o_t", FLOAT, ["a", "b"])])
    outer_else = helper.make_graph([node("Identity", ["x"], ["o_e"], name="outer_else_id")], "outer_else", [],
                                   [out("o_e", FLOAT, [2, 3])])
    graph = helper.make_graph([node("Not", ["c"], ["nc"], name="not"),
                               node("If", ["nc"], ["y"], name="outer_if", then_branch=outer_then, else_branch=outer_else)],
                              "m", [inp("x", FLOAT, [2, 3]), inp("c", BOOL, [])], [out("y", FLOAT, ["a", "b"])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    found = [f for f in _findings(m, "10.1", "If") if f.node == "inner_if"]
    assert [(f.severity, f.path) for f in found] == [("blocking", ["outer_if", "inner_if"])]


def test_check_reads_branch_ranks_from_shape_inference(tmp_path, capsys):
    m = _if("input")
    for attr in m.graph.node[0].attribute:  # branch outputs without a declared type
        name = attr.g.output[0].name
        attr.g.output[0].Clear()
        attr.g.output[0].name = name
    path = tmp_path / "vad_like.onnx"
    onnx.save(m, path)
    assert main(["check", str(path), "--trt", "8.6", "--json"]) == 1
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["op"] == "If"]
    assert len(found) == 1 and "rank 2" in found[0]["message"] and "rank 1" in found[0]["message"]


# -------------------------------------------------------------------------------- the CLI, auto
def test_check_prints_the_change_to_make(tmp_path, capsys):
    path = tmp_path / "tf2onnx_upsample.onnx"
    onnx.save(_resize("floor"), path)
    assert main(["check", str(path), "--trt", "10.1"]) == 1
    text = capsys.readouterr().out
    assert "BLOCKING  resize (Resize)" in text
    assert "fix: resize-nearest-mode" in text
    source = tmp_path / "zp.onnx"
    onnx.save(_qdq(3), source)
    assert main(["check", str(source), "--trt", "8.6"]) == 1
    assert "fix: no rewrite: use symmetric quantization" in capsys.readouterr().out


def test_passes_auto_leaves_a_restriction_as_exit_4(tmp_path, capsys):
    source, target = tmp_path / "zp.onnx", tmp_path / "zp_fixed.onnx"
    onnx.save(_qdq(3), source)
    assert main([str(source), str(target), "--passes", "auto", "--trt", "8.6", "--no-verify"]) == 4
    assert target.exists()


def test_every_restriction_cites_the_importer_source_and_a_fix():
    for r in RESTRICTIONS:
        # onnx-tensorrt branches: 8.0-GA..10.1-GA, and 7.0, 7.1, 7.2.1, 9.1, 9.3 (no -GA in their names)
        assert any(b in r.evidence for b in ("-GA", "9.1", "9.3", "7.0", "7.1", "7.2.1")), r.name
        assert r.upstream and r.ops, r.name


@pytest.mark.parametrize("trt", ["8.6", "10.1"])
def test_qoperator_and_dynamic_quantization_ops_say_to_quantize_in_qdq_format(trt):
    m = model([node("DynamicQuantizeLinear", ["x"], ["q", "s", "zp"], name="dql"),
               node("MatMulInteger", ["q", "w", "zp", "wzp"], ["y"], name="mmi")],
              [inp("x", FLOAT, [2, 4])], [out("y", onnx.TensorProto.INT32, [2, 3])],
              [init("w", np.ones((4, 3), np.uint8)), init("wzp", np.uint8(0))], opset=13)
    for op in ("DynamicQuantizeLinear", "MatMulInteger"):
        found = _findings(m, trt, op)
        assert [(f.severity, f.rule) for f in found] == [("blocking", "no-importer")], found
        assert "QuantFormat.QDQ" in found[0].message


@pytest.mark.parametrize("line,error_id", [
    ('Assertion failed: shiftIsAllZeros(zeroPoint) && "TensorRT only supports symmetric quantization. The zero point for '
     'the QuantizeLinear/DequantizeLinear operator must be all zeros."', "qdq-asymmetric-zero-point"),
    ("In node 3 with name: q and operator: QuantizeLinear (importQuantizeLinear): UNSUPPORTED_NODE: Found unsupported "
     "input type of UINT8", "qdq-uint8"),
    ('Assertion failed: scaleAllPositive && "Scale coefficients must all be positive"', "qdq-scale-not-positive"),
])
def test_explain_knows_the_quantization_errors_check_predicts(line, error_id):
    from graphfix.check.errors import match_log

    found = match_log(line)
    # UINT8: the pass that rewrites a zero point of 128 exactly (another zero point stays check's remedy)
    assert found and found[0].id == error_id and found[0].fix_pass == ("qdq-uint8-to-int8" if error_id == "qdq-uint8" else None)
    predicted = {f.error_id for trt in ("8.6", "10.1") for m in (_qdq(3), _qdq(128, np.uint8), _qdq(0, scale=-1.0))
                 for f in check_model(m, trt).findings}
    assert error_id in predicted


def test_the_readiness_matrix_says_what_to_change(tmp_path, capsys):
    path = tmp_path / "tf2onnx_upsample.onnx"
    onnx.save(_resize("floor"), path)
    assert main(["check", str(path), "--trt", "9.2,10.1"]) == 0  # fixable at both: a pass rewrites it
    assert "fixable: resize-nearest-mode" in capsys.readouterr().out
    zp = tmp_path / "asymmetric.onnx"
    onnx.save(_qdq(3), zp)
    assert main(["check", str(zp), "--trt", "8.6,10.1"]) == 1
    text = capsys.readouterr().out
    assert "BLOCKED" in text and "fix: use symmetric quantization" in text


def test_any_finding_inside_a_body_names_the_nodes_that_hold_it():
    then = helper.make_graph([node("Unique", ["x"], ["u"], name="unique_in_then", sorted=1)], "then", [],
                             [out("u", FLOAT, ["n"])])
    other = helper.make_graph([node("Identity", ["x"], ["e"], name="else_id")], "else", [], [out("e", FLOAT, ["n"])])
    graph = helper.make_graph([node("If", ["c"], ["y"], name="gate", then_branch=then, else_branch=other)], "m",
                              [inp("x", FLOAT, [4]), inp("c", BOOL, [])], [out("y", FLOAT, ["n"])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    found = _findings(m, "10.1", "Unique")
    assert [(f.severity, f.rule, f.path) for f in found] == [("blocking", "no-importer", ["gate", "unique_in_then"])]


def test_onnxruntime_quantizer_contrib_ops_say_to_quantize_in_qdq_format():
    graph = helper.make_graph([node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q"),
                               helper.make_node("QLinearSigmoid", ["q", "s", "zp", "s", "zp"], ["qs"], name="qsig",
                                                domain="com.microsoft"),
                               node("DequantizeLinear", ["qs", "s", "zp"], ["y"], name="dq")], "ort_qoperator",
                              [inp("x", FLOAT, [4])], [out("y", FLOAT, [4])], [init("s", np.float32(0.1)), init("zp", np.int8(0))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=7)
    found = _findings(m, "10.1", "QLinearSigmoid")
    assert [(f.severity, f.remedy) for f in found] == [("blocking", "qoperator-to-qdq")]  # lowered to Q/DQ
    lstm = helper.make_graph([helper.make_node("DynamicQuantizeLSTM", ["x"], ["y"], name="dq_lstm", domain="com.microsoft")],
                             "dynamic", [inp("x", FLOAT, [4])], [out("y", FLOAT, [4])])
    m = helper.make_model(lstm, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)], ir_version=7)
    found = _findings(m, "10.1", "DynamicQuantizeLSTM")
    assert [f.severity for f in found] == ["blocking"] and "QuantFormat.QDQ" in found[0].remedy


@pytest.mark.parametrize("trt,refused", [("8.5", True), ("8.6", True), ("10.1", False)])
def test_fp8_quantization_is_refused_before_9_0(trt, refused):
    """modelopt's FP8 Q/DQ (fixtures/real/modelopt_cnn_fp8.onnx): 8.6-GA's convertDtype has no FLOAT8E4M3FN."""
    m = onnx.load(str(Path(__file__).resolve().parents[2] / "fixtures" / "real" / "modelopt_cnn_fp8.onnx"))
    fp8 = [f for f in check_model(m, trt).findings if "FLOAT8E4M3FN" in f.message]
    assert bool(fp8) == refused
    assert all(f.severity == "blocking" and "INT8" in f.upstream for f in fp8)
