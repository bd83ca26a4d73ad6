"""dequantize-dynamic (opt-in, not exact): onnxruntime's dynamic quantization chains as the float
op on the dequantized weights; run only by its option, kept within its bound with the deviation
reported, and the report says the model is no longer quantized."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphfix
from graphfix import passes
from graphfix.check.findings import check_model, passes_for
from graphfix.errors import GraphfixError
from graphfix.pipeline import inexact
from tests.helpers.support import ort_run

NAME = "dequantize-dynamic"


def _t(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _model(conv=False):
    """What quantize_dynamic writes: DynamicQuantizeLinear -> MatMulInteger/ConvInteger -> Cast -> Mul(x_scale * w_scale)."""
    rng = np.random.default_rng(0)
    shape = (3, 2, 3, 3) if conv else (8, 4)
    inits = [_t("w", rng.integers(-127, 128, shape).astype(np.int8)), _t("ws", np.float32(0.01)), _t("wz", np.int8(0))]
    integer = helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], pads=[1, 1, 1, 1]) if conv else \
        helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"])
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xscale", "xz"]),
             helper.make_node("Mul", ["xscale", "ws"], ["scales"]), integer,
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "scales"], ["y"])]
    x_shape, y_shape = ([1, 2, 5, 5], [1, 3, 5, 5]) if conv else ([2, 8], [2, 4])
    graph = helper.make_graph(nodes, "dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


@pytest.mark.parametrize("conv", [False, True])
def test_the_chain_becomes_the_float_op_on_dequantized_weights(conv):
    model = _model(conv)
    result = passes.opt_in(NAME).apply(model)
    ops = [n.op_type for n in result.model.graph.node]
    assert result.rewritten == 1 and ops == ["Conv" if conv else "MatMul"]
    x = {"x": np.random.default_rng(3).standard_normal([1, 2, 5, 5] if conv else [2, 8]).astype(np.float32)}
    before, after = ort_run(model, x)[0], ort_run(result.model, x)[0]
    assert 0 < np.abs(before - after).max() <= inexact.MAX_OF_PEAK * np.abs(before).max()  # the activation rounding, gone


def test_a_chain_other_than_onnxruntimes_is_a_finding():
    model = _model()
    model.graph.node[3].attribute[0].i = TensorProto.DOUBLE  # Cast to double: not the scale chain
    result = passes.opt_in(NAME).apply(model)
    assert result.rewritten == 0 and "Cast to float" in result.findings[0].message


def test_never_selected_by_all_or_a_pass_list():
    assert NAME not in [p.name for p in passes.select("all")]
    with pytest.raises(GraphfixError, match="--dequantize-dynamic"):
        passes.get(NAME)
    assert "MatMulInteger" in [n.op_type for n in graphfix.fix(_model(), passes="all").model.graph.node]


def test_with_the_option_it_is_kept_reported_and_says_the_model_is_no_longer_quantized():
    result = graphfix.fix(_model(), passes="all", dequantize_dynamic=True, trt="10.1")
    record = next(p for p in result.report.passes if p.name == NAME)
    assert record.verdict == "kept" and "% of its peak" in record.reason
    assert 0 < record.outputs["y"]["of_peak"] <= inexact.MAX_OF_PEAK
    assert any("no longer quantized" in n for n in result.report.notes)
    assert [n.op_type for n in result.model.graph.node] == ["MatMul"]
    assert result.report.trt["before"]["blocking"] > 0 and not result.report.blocking_left


def test_beyond_the_bound_it_is_rolled_back(monkeypatch):
    monkeypatch.setattr(inexact, "MAX_OF_PEAK", 1e-9)
    result = graphfix.fix(_model(), passes="all", dequantize_dynamic=True)
    record = next(p for p in result.report.passes if p.name == NAME)
    assert record.verdict == "rolled-back" and "beyond the bound" in record.reason
    assert "MatMulInteger" in [n.op_type for n in result.model.graph.node]


def test_check_names_the_opt_in_as_the_remedy_never_as_the_fixing_pass():
    report = check_model(_model(), "10.1")
    dynamic = [f for f in report.findings if f.op in ("DynamicQuantizeLinear", "MatMulInteger")]
    assert len(dynamic) == 2 and all(f.severity == "blocking" and f.fix_pass is None for f in dynamic)
    assert all("--dequantize-dynamic" in f.remedy and "no longer quantized" in f.remedy for f in dynamic)
    assert NAME not in passes_for(report)


def test_a_quantized_embedding_lookup_becomes_a_float_gather_with_the_same_values():
    """quantize_dynamic's embeddings: DequantizeLinear(Gather(UINT8 table, ids)), asymmetric."""
    table = np.random.default_rng(5).integers(0, 256, (10, 4)).astype(np.uint8)
    inits = [_t("table", table), _t("s", np.float32(0.05)), _t("z", np.uint8(122))]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["g"]), helper.make_node("DequantizeLinear", ["g", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "embedding", [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    result = passes.opt_in(NAME).apply(model)
    assert result.rewritten == 1 and [n.op_type for n in result.model.graph.node] == ["Gather"]
    ids = {"ids": np.array([0, 9, 4], np.int64)}
    np.testing.assert_array_equal(ort_run(model, ids)[0], ort_run(result.model, ids)[0])


def _contrib_model(fused: str):
    """onnxruntime's fused forms: DynamicQuantizeMatMul (float A) and MatMulIntegerToFloat (A from a DynamicQuantizeLinear)."""
    rng = np.random.default_rng(6)
    inits = [_t("w", rng.integers(-127, 128, (8, 4)).astype(np.int8)), _t("ws", np.full(4, 0.01, np.float32)),
             _t("wz", np.zeros(4, np.int8)), _t("bias", rng.standard_normal(4).astype(np.float32))]
    if fused == "DynamicQuantizeMatMul":
        nodes = [helper.make_node(fused, ["x", "w", "ws", "wz", "bias"], ["y"], domain="com.microsoft")]
    else:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xscale", "xz"]),
                 helper.make_node(fused, ["xq", "w", "xscale", "ws", "xz", "wz", "bias"], ["y"], domain="com.microsoft")]
    graph = helper.make_graph(nodes, "fused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=7)


@pytest.mark.parametrize("fused", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
def test_onnxruntimes_fused_forms_become_matmul_plus_bias(fused):
    model = _contrib_model(fused)
    result = passes.opt_in(NAME).apply(model)
    assert result.rewritten == 1 and [n.op_type for n in result.model.graph.node] == ["MatMul", "Add"]
    x = {"x": np.random.default_rng(7).standard_normal((2, 8)).astype(np.float32)}
    before, after = ort_run(model, x)[0], ort_run(result.model, x)[0]
    assert np.abs(before - after).max() <= inexact.MAX_OF_PEAK * np.abs(before).max()


@pytest.mark.parametrize("direction,per_channel", [("forward", False), ("bidirectional", True)])
def test_dynamic_quantize_lstm_becomes_lstm_on_the_weights_transposed_back(direction, per_channel):
    """onnxruntime stores W/R transposed, [directions, input, 4*hidden], scales per direction or per column."""
    rng = np.random.default_rng(8)
    d, hidden, size = (2 if direction == "bidirectional" else 1), 3, 4
    w, r = rng.integers(-127, 128, (d, size, 4 * hidden)).astype(np.int8), rng.integers(-127, 128, (d, hidden, 4 * hidden)).astype(np.int8)
    shape = (d, 4 * hidden) if per_channel else (d,)
    scale = lambda: rng.uniform(0.002, 0.01, shape).astype(np.float32)  # noqa: E731
    inits = [_t("w", w), _t("r", r), _t("b", rng.standard_normal((d, 8 * hidden)).astype(np.float32) * 0.1),
             _t("ws", scale()), _t("wz", np.zeros(shape, np.int8)), _t("rs", scale()), _t("rz", np.zeros(shape, np.int8))]
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"], ["y", "yh", "yc"],
                            domain="com.microsoft", hidden_size=hidden, direction=direction)
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, d, 2, hidden]),
                               helper.make_tensor_value_info("yc", TensorProto.FLOAT, [d, 2, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=7)
    result = passes.opt_in(NAME).apply(model)
    assert result.rewritten == 1 and [n.op_type for n in result.model.graph.node] == ["LSTM"]
    x = {"x": rng.standard_normal((5, 2, size)).astype(np.float32)}
    for before, after in zip(ort_run(model, x), ort_run(result.model, x), strict=True):
        assert np.abs(before - after).max() <= inexact.MAX_OF_PEAK * np.abs(before).max()
