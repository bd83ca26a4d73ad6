"""shape-tensor-ops: shape arithmetic the 8.0/8.2 parsers refuse, rewritten into ops they allow."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fixtures.recipes import shape_tensor_ops as recipes
from fixtures.recipes._onnx import FLOAT, const, inp, model, node, out
from graphfix.check.findings import check_model
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    freeze_inputs,
    node_cases,
    ort_run,
    runnable,
)

OPS = ["Neg", "Abs", "Relu", "Floor", "Ceil", "Pow", "Clip"]


@pytest.mark.parametrize("fx", recipes.FIXTURES, ids=lambda f: f.name)
def test_fixture_rewritten_with_equal_outputs(fx):
    check_fixture(fx, "shape-tensor-ops")


@pytest.mark.parametrize("fx", recipes.FIXTURES, ids=lambda f: f.name)
def test_check_flags_it_for_8_0_and_8_2_only(fx):
    def flagged(v):
        return any(f.fix_pass == "shape-tensor-ops" for f in check_model(fx.build(), v).findings)

    assert flagged("8.0") and flagged("8.2")
    assert not flagged("8.4") and not flagged("8.6") and not flagged("7.2")


def test_data_values_are_left_alone():
    """A Floor on image data is not a shape computation: nothing to rewrite, at any target."""
    m = model([node("Floor", ["x"], ["y"], name="/Floor")], [inp("x", FLOAT, [2, 3])], [out("y", FLOAT, [2, 3])])
    assert not [f for f in check_model(m, "8.2").findings if f.fix_pass == "shape-tensor-ops"]


@pytest.mark.parametrize("op", OPS)
def test_official_node_cases(op):
    cases = node_cases(op)
    assert cases, op
    ran = 0
    for case in cases:
        for inputs, expected in case.data_sets:
            feeds = case_feeds(case.model, inputs)
            m = runnable(case.model, 13)
            if op in ("Clip", "Pow"):  # bounds and exponents are constants on shape paths
                m = freeze_inputs(m, {k: feeds.pop(k) for k in list(feeds) if k != m.graph.node[0].input[0]})
            exponent = [t for t in m.graph.initializer if op == "Pow"]
            e = onnx.numpy_helper.to_array(exponent[0]) if exponent else None
            if e is not None and (e.size != 1 or not np.isin(e, [1, 2, 3, 4]).all()):
                continue  # per-element, fractional or negative powers: reported, not rewritten
            if any(np.issubdtype(v.dtype, np.floating) and not np.isfinite(v).all() for v in feeds.values()):
                continue  # shape values are finite
            result = check_rewrite(m, "shape-tensor-ops", feeds, force=True)
            for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-6)
            ran += 1
    assert ran, op


def _one(op: str, dtype, extra=()) -> onnx.ModelProto:
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return model([*extra, node(op, ["x", *(["e"] if op == "Pow" else [])], ["y"], name=f"/{op}")],
                 [inp("x", elem, [7])], [out("y", elem, [7])])


@given(st.sampled_from(["Neg", "Abs", "Floor", "Ceil", "Pow"]), st.lists(st.floats(-1e6, 1e6, width=32), min_size=7, max_size=7),
       st.integers(1, 4))
def test_values_equal_on_random_floats(op, values, n):
    extra = [const("e", float(n), np.float32)] if op == "Pow" else []
    x = np.array(values, np.float32)
    if op == "Pow":
        x = np.clip(x, -100, 100)
    check_rewrite(_one(op, np.float32, extra), "shape-tensor-ops", {"x": x}, force=True, atol=0, rtol=1e-6)


@given(st.sampled_from(["Neg", "Abs"]), st.lists(st.integers(-(2**40), 2**40), min_size=7, max_size=7))
def test_values_equal_on_random_int64(op, values):
    check_rewrite(_one(op, np.int64), "shape-tensor-ops", {"x": np.array(values, np.int64)}, force=True, atol=0, rtol=0)


def test_clip_with_computed_bounds_is_reported():
    m = model([node("Shape", ["x"], ["s"]), const("i", 0, np.int64), node("Gather", ["s", "i"], ["n"], axis=0),
               node("Clip", ["n", "n"], ["c"], name="/Clip"), const("ax", [0], np.int64),
               node("Unsqueeze", ["c", "ax"], ["c1"]), node("Reshape", ["x", "c1"], ["y"])],
              [inp("x", FLOAT, ["N"])], [out("y", FLOAT, ["M"])])
    from graphfix import passes

    result = passes.get("shape-tensor-ops").apply(m, trt="8.2")
    assert result.rewritten == 0 and "computed" in result.findings[0].message


def test_constant_operands_are_folded():
    """DINOv2's num_positions ** 0.5 exported as Pow(Constant 4.0, Constant 0.5) on a Reshape target."""
    m = model([const("n", 4.0, np.float32), const("half", 0.5, np.float32), node("Pow", ["n", "half"], ["r"], name="/Pow"),
               node("Cast", ["r"], ["ri"], to=7), const("ax", [0], np.int64), node("Unsqueeze", ["ri", "ax"], ["r1"]),
               node("Concat", ["r1", "r1"], ["target"], axis=0), node("Reshape", ["x", "target"], ["y"])],
              [inp("x", FLOAT, [4])], [out("y", FLOAT, [2, 2])])
    assert any(f.fix_pass == "shape-tensor-ops" for f in check_model(m, "8.2").findings)
    result = check_rewrite(m, "shape-tensor-ops", {"x": np.arange(4, dtype=np.float32)}, trt="8.2")
    assert "Pow" not in [n.op_type for n in result.model.graph.node]
