"""requantize-symmetric (opt-in, not exact): asymmetric INT8/UINT8 Q/DQ become symmetric INT8 with
zero point 0 covering the same range, weights re-quantized; never selected by `all`/`auto` or a
pass list, run only by its option, kept within its bound with the deviation in quantization steps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphfix
from graphfix import passes
from graphfix.errors import GraphfixError
from graphfix.passes import requantize_symmetric as rq
from graphfix.pipeline import inexact
from tests.helpers.support import ort_run

NAME = "requantize-symmetric"


def _t(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _model(x_zero=17, y_zero=105, w_zero=120, dtype=np.uint8):
    """x -> Q/DQ (asymmetric) -> MatMul with asymmetric DQ weights -> Q/DQ (asymmetric) -> y."""
    rng = np.random.default_rng(0)
    inits = [_t("xs", np.float32(0.02)), _t("xz", dtype(x_zero)), _t("ys", np.float32(0.01)), _t("yz", dtype(y_zero)),
             _t("w", rng.integers(90, 150, (8, 4)).astype(dtype)), _t("ws", np.float32(0.01)), _t("wz", dtype(w_zero))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["mq"]),
             helper.make_node("DequantizeLinear", ["mq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "asym", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def _zero_points(model):
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return [inits[n.input[2]] for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]


def test_symmetric_scale_covers_the_asymmetric_range():
    # UINT8 zero point 17, scale 0.02: the range [-0.34, 4.76] -> 4.76 / 127
    assert rq.symmetric_scale(np.float32(0.02), np.uint8(17)) == pytest.approx(0.02 * 238 / 127)
    assert rq.symmetric_scale(np.float32(0.5), np.int8(-10)) == pytest.approx(0.5 * 137 / 127)


def test_weights_are_requantized_to_int8_with_zero_point_zero_within_half_a_step():
    w = np.random.default_rng(1).integers(0, 256, (3, 5)).astype(np.uint8)
    scale, zero = np.array([0.1, 0.2, 0.3], np.float32), np.array([10, 128, 250], np.uint8)
    q, s = rq.requantized_weights(w, scale, zero, axis=0)
    real = (w.astype(np.float64) - zero[:, None]) * scale[:, None]
    assert q.dtype == np.int8 and s.shape == scale.shape
    assert np.abs(q * s[:, None].astype(np.float64) - real).max() <= s.max() / 2 + 1e-6


def test_every_asymmetric_qdq_becomes_int8_zero_point_zero_and_stays_within_a_step():
    model = _model()
    result = passes.opt_in(NAME).apply(model)
    assert result.rewritten == 3 and not result.findings  # the weights' DQ and both Q (with their DQ)
    assert all(z.dtype == np.int8 and not z.any() for z in _zero_points(result.model))
    x = {"x": np.random.default_rng(2).uniform(-0.3, 4.7, (2, 8)).astype(np.float32)}
    before, after = ort_run(model, x)[0], ort_run(result.model, x)[0]
    new_scale = float(rq.symmetric_scale(np.float32(0.01), np.uint8(105)))
    assert np.abs(before - after).max() <= 8 * new_scale  # inexact, but a few steps of the new scale


def test_zero_point_128_and_symmetric_int8_are_left_to_the_exact_pass():
    assert passes.opt_in(NAME).apply(_model(x_zero=128, y_zero=128, w_zero=128)).rewritten == 0
    assert passes.opt_in(NAME).apply(_model(x_zero=0, y_zero=0, w_zero=0, dtype=np.int8)).rewritten == 0


def test_never_selected_by_all_auto_or_a_pass_list():
    assert NAME not in [p.name for p in passes.select("all")]
    assert not passes.opt_in(NAME).exact and all(p.exact for p in passes.all_passes())
    with pytest.raises(GraphfixError, match="--requantize-symmetric"):
        passes.get(NAME)
    with pytest.raises(GraphfixError, match="not exact"):
        graphfix.fix(_model(), passes=[passes.opt_in(NAME)])


@pytest.mark.parametrize("chosen", [{"passes": "all"}, {"passes": "auto", "trt": "10.1"}, {"passes": "auto", "trt": "8.6"}])
def test_without_the_option_the_asymmetric_zero_points_stay(chosen):
    result = graphfix.fix(_model(), **chosen)
    assert NAME not in [p.name for p in result.report.passes]
    assert any(z.any() for z in _zero_points(result.model))


def test_with_the_option_it_is_kept_and_reports_the_deviation_in_steps():
    result = graphfix.fix(_model(), passes="all", requantize_symmetric=True, val_range={"x": (-0.3, 4.7)})
    record = next(p for p in result.report.passes if p.name == NAME)
    assert record.verdict == "kept" and record.rewritten == 3
    y = record.outputs["y"]
    assert 0 < y["steps"] <= inexact.MAX_STEPS and "step" in y["bound"]
    assert "not exact" in record.reason and "quantization step" in record.reason
    assert all(not z.any() for z in _zero_points(result.model))
    assert result.report.settings["requantize_symmetric"] is True
    assert result.report.verification.startswith("requantize-symmetric's own comparison")  # no pass rewrote: sessions ran


def test_beyond_the_bound_it_is_rolled_back_with_the_reason(monkeypatch):
    monkeypatch.setattr(inexact, "MAX_STEPS", 1e-6)
    result = graphfix.fix(_model(), passes="all", requantize_symmetric=True, val_range={"x": (-0.3, 4.7)})
    record = next(p for p in result.report.passes if p.name == NAME)
    assert record.verdict == "rolled-back" and "output y moved by" in record.reason and "beyond the bound" in record.reason
    assert any(z.any() for z in _zero_points(result.model))


def test_a_maxpool_between_quantize_and_dequantize_is_retyped_with_them():
    """A QOperator model lowered to QDQ keeps its UINT8 MaxPool between the Q and the DQ."""
    inits = [_t("s", np.float32(0.02)), _t("z", np.uint8(30))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("MaxPool", ["q"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("DequantizeLinear", ["p", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    result = passes.opt_in(NAME).apply(model)
    assert result.rewritten == 1 and not result.findings
    assert all(z.dtype == np.int8 and not z.any() for z in _zero_points(result.model))
    x = {"x": np.random.default_rng(4).uniform(-1, 5, (1, 2, 4, 4)).astype(np.float32)}
    step = float(rq.symmetric_scale(np.float32(0.02), np.uint8(30)))
    assert np.abs(ort_run(model, x)[0] - ort_run(result.model, x)[0]).max() <= step


def test_strict_ends_the_run_instead_of_rolling_the_step_back(monkeypatch):
    monkeypatch.setattr(inexact, "MAX_STEPS", 1e-6)
    with pytest.raises(GraphfixError, match="--strict: requantize-symmetric rolled back"):
        graphfix.fix(_model(), passes="all", requantize_symmetric=True, strict=True, val_range={"x": (-0.3, 4.7)})


@settings(max_examples=25, deadline=None)
@given(zero=st.integers(0, 255).filter(lambda z: z != 128), scale=st.floats(1e-3, 1.0), seed=st.integers(0, 1000))
def test_one_requantized_pair_moves_a_value_by_at_most_one_new_step(zero, scale, seed):
    """Within the original range, |old - new| <= s/2 + s'/2 <= s' (rounding to each grid); beyond it both saturate."""
    inits = [_t("s", np.float32(scale)), _t("z", np.uint8(zero))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    fixed = passes.opt_in(NAME).apply(model).model
    lo, hi = scale * (0 - zero), scale * (255 - zero)
    x = {"x": np.random.default_rng(seed).uniform(1.5 * lo - scale, 1.5 * hi + scale, 64).astype(np.float32)}
    step = float(rq.symmetric_scale(np.float32(scale), np.uint8(zero)))
    assert np.abs(ort_run(model, x)[0] - ort_run(fixed, x)[0]).max() <= step * (1 + 1e-5)
