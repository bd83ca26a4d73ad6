"""int-argmax-topk: fixtures, ONNX ArgMax/ArgMin/TopK node cases on integer data, the bound proof,
version boundaries, random shapes/axes/attributes with ties."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import graphfix
from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import INT64, const, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    node_cases,
    ort_run,
    remaining_matches,
    runnable,
)

INT8 = TensorProto.INT8
NAME = "int-argmax-topk"
FIXTURES = [fx for group, fx in all_fixtures() if group == "int_argmax_topk"]
REWRITTEN = [fx for fx in FIXTURES if not fx.finding]
INSIDE, OUTSIDE = ["5.1", "7.2", "8.0", "8.2", "8.4", "8.5", "8.5.3"], ["8.6", "9.0", "10.1"]
OPS = ("ArgMax", "ArgMin", "TopK")


def _int_ops(m: onnx.ModelProto, trt: str = "8.5") -> list[str]:
    """Nodes the target would reject for integer data (what the pass must remove)."""
    return [f.op for f in check_model(m, trt).findings if f.fix_pass == NAME]


@pytest.mark.parametrize("fx", REWRITTEN, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, NAME)
    assert _int_ops(result.model) == []


def test_unbounded_values_leave_a_finding_that_says_why():
    fx = next(f for f in FIXTURES if f.finding)
    result = passes.get(NAME).apply(fx.build())
    assert result.rewritten == 0 and len(result.findings) == 1
    message = result.findings[0].message
    assert "2^24" in message and "cast to float in the export" in message and ">= 8.6" in message


@pytest.mark.parametrize("version,rewrites", [(v, True) for v in INSIDE] + [(v, False) for v in OUTSIDE])
def test_version_boundaries(version, rewrites):
    fx = next(f for f in FIXTURES if f.name == "clip_text_pooling")
    result = passes.get(NAME).apply(fx.build(), trt=version)
    assert (result.rewritten > 0) == rewrites
    blocking = [f for f in check_model(fx.build(), version).findings if f.severity == "blocking" and f.op == "ArgMax"]
    assert [f.fix_pass for f in blocking] == ([NAME] if rewrites else [])


@pytest.mark.parametrize("version", ["8.2", "8.5", "8.6", "10.1"])
@pytest.mark.parametrize("fx", REWRITTEN, ids=lambda fx: fx.name)
def test_auto_leaves_no_blocking_finding(fx, version):
    result = graphfix.fix(fx.build(), "auto", trt=version, input_shapes=fx.input_shapes, val_range=fx.val_range, seed=3)
    assert [f.message for f in check_model(result.model, version).findings if f.severity == "blocking"] == []
    assert all(r.verdict in ("kept", "unchanged") for r in result.report.passes), [r.reason for r in result.report.passes]
    ops = [n.op_type for n in result.model.graph.node]
    assert ("Cast" in ops and any(o in ops for o in OPS)) or version in ("8.6", "10.1")


# --------------------------------------------------------------- the bound proof
def _chain(source_nodes, source_inputs, data: str, y_shape, inits=()):
    nodes = [*source_nodes, node("ArgMax", [data], ["y"], name="/ArgMax", axis=-1)]
    return model(nodes, source_inputs, [out("y", INT64, y_shape)], list(inits), opset=13)


def test_values_beyond_2_24_are_not_rewritten():
    big = np.array([[1 << 24, (1 << 24) + 1, 3]], np.int64)
    m = _chain([node("Cast", ["x"], ["xi"], name="/Cast", to=INT64), node("Add", ["xi", "offset"], ["s"], name="/Add")], [inp("x", INT8, [1, 3])], "s", [1, 1],
               inits=[init("offset", big)])
    assert passes.get(NAME).apply(m).rewritten == 0
    small = _chain([node("Cast", ["x"], ["xi"], name="/Cast", to=INT64), node("Add", ["xi", "offset"], ["s"], name="/Add")], [inp("x", INT8, [1, 3])], "s", [1, 1],
                   inits=[init("offset", big - 200)])
    check_rewrite(small, NAME, {"x": np.array([[127, -128, 5]], np.int8)})


def test_range_and_static_shape_values_are_bounded():
    m = _chain([node("Shape", ["x"], ["shp"], name="/Shape"), const("zero", 0, np.int64),
                node("ReduceMax", ["shp"], ["n"], name="/ReduceMax", keepdims=0), const("one", 1, np.int64),
                node("Range", ["zero", "n", "one"], ["r"], name="/Range"),
                node("Mul", ["r", "r"], ["rr"], name="/Mul")],
               [inp("x", TensorProto.FLOAT, [4, 7])], "rr", [1])
    check_rewrite(m, NAME, {"x": np.zeros((4, 7), np.float32)})


def test_token_ids_bounded_through_a_reshape_into_an_embedding_gather():
    m = model([node("Reshape", ["ids", "flat"], ["ids_flat"], name="/Reshape"),
               node("Gather", ["table", "ids_flat"], ["emb"], name="/Gather"),
               node("ArgMax", ["ids"], ["y"], name="/ArgMax", axis=1, keepdims=1, select_last_index=1)],
              [inp("ids", INT64, [2, 5])], [out("y", INT64, [2, 1]), out("emb", TensorProto.FLOAT, [10, 3])],
              [init("flat", np.array([-1], np.int64)), init("table", np.ones((50, 3), np.float32))])
    ids = np.array([[3, 49, 49, 0, 1], [7, 7, 2, 2, 7]], np.int64)
    check_rewrite(m, NAME, {"ids": ids})


def test_float_data_is_not_matched():
    m = _chain([], [inp("x", TensorProto.FLOAT, [2, 3])], "x", [2, 1])
    assert remaining_matches(m, NAME) == [] and passes.get(NAME).apply(m).rewritten == 0


# ------------------------------------------------------------- ONNX node cases
def _on_ints(case_model: onnx.ModelProto, dtype: int) -> onnx.ModelProto:
    """The case's single node on integer data: an INT8 graph input cast to ``dtype`` (the cast
    is what bounds the values; INT8 data has ties aplenty)."""
    m = runnable(case_model, 13)
    op = m.graph.node[0]
    data = m.graph.input[0]
    shape = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in data.type.tensor_type.shape.dim]
    cast = helper.make_node("Cast", [data.name], ["data_int"], name="/Cast", to=dtype)
    new_op = helper.make_node(op.op_type, ["data_int", *op.input[1:]], list(op.output), name="/op")
    new_op.attribute.extend(op.attribute)
    inputs = [inp(data.name, INT8, shape), *m.graph.input[1:]]
    outputs = [onnx.ValueInfoProto.FromString(o.SerializeToString()) for o in m.graph.output]
    if op.op_type == "TopK":
        outputs[0].type.tensor_type.elem_type = dtype
    return model([cast, new_op], inputs, outputs, opset=next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")))


CASES = [c for op in OPS for c in node_cases(op)]


@pytest.mark.parametrize("dtype", [TensorProto.INT32, TensorProto.INT64], ids=["int32", "int64"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_node_cases_on_integers(case, dtype):
    m = _on_ints(case.model, dtype)
    for inputs, _expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        x = np.asarray(inputs[0], np.float64)
        feeds[m.graph.input[0].name] = np.clip(np.round(x * 2), -128, 127).astype(np.int8)  # ties from rounding
        result = check_rewrite(m, NAME, feeds)
        assert [n.op_type for n in result.model.graph.node if n.op_type in OPS] == [case.model.graph.node[0].op_type]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_node_cases_as_given_are_left_alone_or_rewritten_exactly(case):
    m = runnable(case.model, 13)
    elem = m.graph.input[0].type.tensor_type.elem_type
    if elem == TensorProto.UINT64:
        pytest.skip("onnxruntime has no uint64 TopK (and TensorRT no uint64 tensors)")
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        if elem in (TensorProto.INT32, TensorProto.INT64):  # a graph input: unbounded, so a finding
            result = passes.get(NAME).apply(m)
            assert result.rewritten == 0 and result.findings
        else:
            assert remaining_matches(m, NAME) == []
        for got, want in zip(ort_run(m, feeds), expected, strict=True):
            np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ random cases
@st.composite
def int_cases(draw):
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    op = draw(st.sampled_from(OPS))
    attrs: dict = {"axis": axis}
    if op == "TopK":
        attrs["largest"] = draw(st.integers(0, 1))
        k = draw(st.integers(1, shape[axis]))
    else:
        attrs["keepdims"] = draw(st.integers(0, 1))
        attrs["select_last_index"] = draw(st.integers(0, 1))
        k = 0
    dtype = draw(st.sampled_from([TensorProto.INT32, TensorProto.INT64]))
    spread = draw(st.sampled_from([1, 3, 127]))  # small spreads: many ties
    return op, shape, attrs, k, dtype, spread, draw(st.integers(0, 2**31))


def _check_random(op, shape, attrs, k, dtype, spread, seed):
    nodes = [node("Cast", ["x"], ["xi"], name="/Cast", to=dtype)]
    axis = attrs["axis"] % len(shape)
    reduced = [d if i != axis else (k if op == "TopK" else 1) for i, d in enumerate(shape)]
    if op != "TopK" and not attrs["keepdims"]:
        reduced.pop(axis)
    outs = [out("y", INT64, reduced)]
    inits = []
    if op == "TopK":
        nodes.append(node("TopK", ["xi", "k"], ["v", "y"], name="/TopK", **attrs))
        outs = [out("v", dtype, reduced), out("y", INT64, reduced)]
        inits = [init("k", np.array([k], np.int64))]
    else:
        nodes.append(node(op, ["xi"], ["y"], name=f"/{op}", **attrs))
    m = model(nodes, [inp("x", INT8, shape)], outs, inits, opset=13)
    x = np.random.default_rng(seed).integers(-spread, spread, shape, endpoint=True).astype(np.int8)
    result = check_rewrite(m, NAME, {"x": x})
    assert _int_ops(result.model) == []
    assert passes.get(NAME).apply(m, trt="8.6").rewritten == 0


@settings(max_examples=40, deadline=None)
@given(int_cases())
def test_random_integer_argmax_topk_equal_onnxruntime(case):
    _check_random(*case)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(int_cases())
def test_random_integer_argmax_topk_equal_onnxruntime_slow(case):
    _check_random(*case)


# ----------------------------------------- reduce-axes-input and the TopK it emits
def _int_reduce_max(length: int) -> onnx.ModelProto:
    return model([node("Cast", ["x"], ["xi"], name="/Cast", to=INT64),
                  node("ReduceMax", ["xi", "axes"], ["y"], name="/ReduceMax", keepdims=0)],
                 [inp("x", INT8, [3, length])], [out("y", INT64, [3])], [init("axes", np.array([1], np.int64))],
                 opset=18)


@pytest.mark.parametrize("length", [6, 100])
def test_integer_reduce_max_ends_without_a_blocker_before_8_6(length):
    """Short static axes: Max of slices; long ones: reduce-axes-input's TopK, cast to float here."""
    m = _int_reduce_max(length)
    x = np.random.default_rng(length).integers(-128, 127, (3, length), endpoint=True).astype(np.int8)
    for version in ("8.2", "8.5"):
        result = graphfix.fix(m, "auto", trt=version, input_shapes={"x": (3, length)})
        assert [f.message for f in check_model(result.model, version).findings if f.severity == "blocking"] == []
        assert all(r.verdict in ("kept", "unchanged") for r in result.report.passes), [r.reason for r in result.report.passes]
        np.testing.assert_array_equal(ort_run(result.model, {"x": x})[0], x.max(1).astype(np.int64))
    ops = [n.op_type for n in passes.get("reduce-axes-input").apply(m).model.graph.node]
    assert ("TopK" in ops) == (length > 64)
