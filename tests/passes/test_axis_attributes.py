"""Passes read an ``axis`` attribute against the rank (passes/_axis.checked_axis; the normalization
passes layernorm-decompose, rmsnorm-decompose, contrib-norm-lower through passes/_norm.first_axis):
one out of ``[-rank, rank)`` is a finding, never a rewrite. Found by the fuzz's out-of-spec
attributes: RMSNormalization and OneHot ``axis`` -2147483649 made lists of 2**31 axes (a hang
and gigabytes), a positive one past the rank normalised over no axis at all."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from fixtures.recipes._onnx import FLOAT, init, inp, node, out
from graphfix import passes
from tests.helpers.contrib import ms_model, vi, weight


def _layer(op: str, axis: int):
    scale = init("scale", np.ones(4, np.float32))
    if op == "SimplifiedLayerNormalization":
        n = helper.make_node(op, ["x", "scale"], ["y"], axis=axis, epsilon=1e-5)
        return "contrib-norm-lower", ms_model([n], [vi("x", np.float32, [2, 3, 4])], [vi("y", np.float32, [2, 3, 4])],
                                              [weight("scale", [4], np.float32)], 17)
    name, opset = ("layernorm-decompose", 17) if op == "LayerNormalization" else ("rmsnorm-decompose", 23)
    return name, _unchecked([node(op, ["x", "scale"], ["y"], axis=axis)], [2, 3, 4], [scale], opset)


def _unchecked(nodes, dims, inits, opset):
    """The model as written (fixtures' ``model`` runs onnx's checker, which refuses such an axis)."""
    x = inp("x", FLOAT, dims) if dims is not None else helper.make_tensor_value_info("x", FLOAT, None)
    g = helper.make_graph(nodes, "g", [x], [out("y", FLOAT, dims)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


@pytest.mark.parametrize("axis", [-1000, 3, 7])
@pytest.mark.parametrize("op", ["LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"])
def test_an_axis_out_of_range_is_a_finding_not_a_rewrite(op, axis):
    name, m = _layer(op, axis)
    result = passes.get(name).apply(m)
    assert result.rewritten == 0, name
    assert any(f"axis {axis} is out of range for a rank-3 input" in f.message for f in result.findings), result.findings


def test_an_axis_beyond_any_rank_is_a_finding_at_an_unknown_rank():
    m = _unchecked([node("RMSNormalization", ["x", "scale"], ["y"], axis=-(2**31) - 1)], None,
                   [init("scale", np.ones(4, np.float32))], 23)
    result = passes.get("rmsnorm-decompose").apply(m)
    assert result.rewritten == 0 and "beyond any tensor's rank" in result.findings[0].message


@pytest.mark.parametrize("axis", [-1000, 3])
def test_a_onehot_axis_out_of_range_is_a_finding_not_a_rewrite(axis):
    g = helper.make_graph([node("OneHot", ["i", "depth", "values"], ["y"], axis=axis)], "g",
                          [helper.make_tensor_value_info("i", TensorProto.INT64, [2, 5])], [out("y", FLOAT, None)],
                          [init("depth", np.array(4, np.int64)), init("values", np.array([0.0, 1.0], np.float32))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    result = passes.get("onehot-decompose").apply(m)
    assert result.rewritten == 0 and any(f"axis {axis} is out of range for a rank-3 output" in f.message for f in result.findings), \
        result.findings
