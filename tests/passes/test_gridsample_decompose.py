"""gridsample-decompose: fixtures, ONNX GridSample node cases, random configurations vs onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, INT64, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.verify.inputs import make_inputs
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

NAME = "gridsample-decompose"
FIXTURES = [fx for group, fx in all_fixtures() if group == "gridsample_decompose"]
#: Ops the decomposition may use: each is imported by TensorRT 8.0.
ALLOWED = {"Abs", "Add", "Cast", "Concat", "Equal", "Floor", "Gather", "Greater", "Max", "Min", "Mul", "Range", "ReduceSum",
           "Reshape", "Shape", "Slice", "Squeeze", "Sub", "Transpose", "Unsqueeze", "Div"}
ELEM = {np.float32: FLOAT, np.float16: FLOAT16}


def _gridsample(x_dims, grid_dims, mode, padding="zeros", align=0, opset=16, dtype=np.float32):
    elem = ELEM[dtype]
    out_dims = [x_dims[0], x_dims[1], *grid_dims[1:-1]]
    return model(
        [node("GridSample", ["x", "grid"], ["y"], name="/GridSample", mode=mode, padding_mode=padding, align_corners=align)],
        [inp("x", elem, x_dims), inp("grid", elem, grid_dims)], [out("y", elem, out_dims)], opset=opset,
    )


def _ops(m: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in m.graph.node}


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, NAME, atol=1e-5, rtol=1e-5, seed=4)
    assert "GridSample" not in _ops(result.model)
    for version in ("8.0", "8.2", "8.4", "8.5", "10.1", "11.1"):
        findings = check_model(result.model, version).findings
        assert not [f for f in findings if f.rule == "no-importer"], (version, findings)
        assert not [f for f in findings if f.fix_pass == NAME], (version, findings)


def test_only_8_0_ops_and_one_gather_of_rows():
    fx = next(f for f in FIXTURES if f.name == "superpoint_sample_descriptors")
    result = passes.get(NAME).apply(fx.build())
    assert result.rewritten == 1 and _ops(result.model) - _ops(fx.build()) <= ALLOWED
    gathers = [n for n in result.model.graph.node if n.op_type == "Gather" and "GridSample" in n.name]
    assert sum(1 for n in gathers if any(a.name == "axis" and a.i == 0 for a in n.attribute)) >= 1
    assert "Range" not in _ops(result.model)  # batch 1: no per-image offsets


@pytest.mark.parametrize("trt,rewrites", [("8.0", True), ("8.4", True), ("8.4.3", True), ("8.5", False), ("10.1", False)])
def test_opset16_bilinear_only_below_8_5(trt, rewrites):
    m = _gridsample([1, 3, 5, 6], [1, 4, 4, 2], "bilinear")
    result = passes.get(NAME).apply(m, trt=trt)
    assert (result.rewritten == 1) is rewrites and ("GridSample" in _ops(result.model)) is not rewrites


@pytest.mark.parametrize("trt", ["8.0", "8.5", "8.6", "10.1", "11.1"])
@pytest.mark.parametrize("case", ["5-D", "opset-20 linear", "opset-20 cubic"])
def test_5d_and_opset20_names_rewritten_everywhere(trt, case):
    m = {
        "5-D": _gridsample([1, 2, 3, 4, 5], [1, 2, 3, 4, 3], "nearest", opset=20),
        "opset-20 linear": _gridsample([1, 3, 5, 6], [1, 4, 4, 2], "linear", opset=20),
        "opset-20 cubic": _gridsample([1, 3, 5, 6], [1, 4, 4, 2], "cubic", opset=20),
    }[case]
    feeds = make_inputs(m, val_range={"grid": (-1.5, 1.5)}, seed=2)[0]
    result = check_rewrite(m, NAME, feeds, atol=1e-5, rtol=1e-5, trt=trt)
    assert "GridSample" not in _ops(result.model)


def test_opset20_nearest_4d_left_alone_from_8_5():
    m = _gridsample([1, 3, 5, 6], [1, 4, 4, 2], "nearest", opset=20)
    assert passes.get(NAME).apply(m, trt="8.5").rewritten == 0
    assert passes.get(NAME).apply(m, trt="8.4").rewritten == 1


def test_default_mode_is_not_an_opset20_name():
    m = model([node("GridSample", ["x", "grid"], ["y"])], [inp("x", FLOAT, [1, 2, 4, 5]), inp("grid", FLOAT, [1, 3, 3, 2])],
              [out("y", FLOAT, [1, 2, 3, 3])], opset=20)
    assert passes.get(NAME).apply(m, trt="8.5").rewritten == 0
    feeds = make_inputs(m, val_range={"grid": (-1.5, 1.5)}, seed=5)[0]
    check_rewrite(m, NAME, feeds, atol=1e-5, rtol=1e-5, trt="8.4")


def test_findings_for_what_is_not_decomposed():
    cubic5d = _gridsample([1, 2, 3, 4, 5], [1, 2, 3, 4, 3], "cubic", opset=20)
    result = passes.get(NAME).apply(cubic5d)
    assert result.rewritten == 0 and "4-D" in result.findings[0].message
    unknown = model(  # x and grid reshaped by runtime shapes of unknown length: rank unknown
        [node("Reshape", ["xs", "sx"], ["x"]), node("Reshape", ["gs", "sg"], ["grid"]),
         node("GridSample", ["x", "grid"], ["y"], mode="linear")],
        [inp("xs", FLOAT, [24]), inp("gs", FLOAT, [8]), inp("sx", INT64, ["r"]), inp("sg", INT64, ["q"])], [out("y", FLOAT, list("abcd"))], opset=20)
    result = passes.get(NAME).apply(unknown)
    assert result.rewritten == 0 and "rank is unknown" in result.findings[0].message


def test_fp16_keeps_dtype():
    m = _gridsample(["N", 4, 6, 7], ["N", 3, 5, 2], "bilinear", "reflection", 1, dtype=np.float16)
    feeds = make_inputs(m, {"x": (2, 4, 6, 7), "grid": (2, 3, 5, 2)}, {"grid": (-1.5, 1.5)}, seed=1)[0]
    result = check_rewrite(m, NAME, feeds, atol=2e-3, rtol=2e-3)
    assert result.model.graph.output[0].type.tensor_type.elem_type == FLOAT16


def test_nearest_rounds_half_to_even():
    m = _gridsample([1, 1, 1, 4], [1, 1, 6, 2], "nearest")
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    gx = np.array([0.0, -0.5, 0.5, 1.0, -1.0, 0.25], np.float32)  # x = 1.5, 0.5, 2.5, 3.5, -0.5, 2.0
    grid = np.stack([gx, np.zeros_like(gx)], -1).reshape(1, 1, 6, 2)
    result = check_rewrite(m, NAME, {"x": x, "grid": grid})
    np.testing.assert_array_equal(ort_run(result.model, {"x": x, "grid": grid})[0].ravel(), [2, 0, 2, 0, 0, 2])


@pytest.mark.parametrize("case", node_cases("GridSample"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 16)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        result = check_rewrite(m, NAME, feeds, atol=1e-5, rtol=1e-5)
        assert "GridSample" not in _ops(result.model)
        np.testing.assert_allclose(ort_run(result.model, feeds)[0], expected[0], atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ random configurations
@st.composite
def configs(draw):
    dims = draw(st.sampled_from([2, 2, 3]))
    mode = draw(st.sampled_from(["nearest", "linear", "cubic"] if dims == 2 else ["nearest", "linear"]))
    opset = draw(st.sampled_from([16, 20])) if dims == 2 else 20
    name = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode) if opset == 16 else mode
    sizes = draw(st.lists(st.integers(1, 7), min_size=dims, max_size=dims))
    points = draw(st.lists(st.integers(1, 5), min_size=dims, max_size=dims))
    return {
        "dims": dims, "mode": name, "opset": opset, "sizes": sizes, "points": points,
        "batch": draw(st.integers(1, 3)), "channels": draw(st.integers(1, 4)),
        "padding": draw(st.sampled_from(["zeros", "border", "reflection"])), "align": draw(st.integers(0, 1)),
        "dtype": draw(st.sampled_from([np.float32, np.float32, np.float16])),
        "dynamic": draw(st.sampled_from(["static", "spatial", "all"])),
        "ties": draw(st.booleans()), "seed": draw(st.integers(0, 2**16)),
    }


def _check_config(c):
    x_dims = [c["batch"], c["channels"], *c["sizes"]]
    g_dims = [c["batch"], *c["points"], c["dims"]]
    names_x, names_g = list(x_dims), list(g_dims)
    if c["dynamic"] != "static":
        names_x[2:] = [f"s{i}" for i in range(c["dims"])]
        names_g[1:-1] = [f"p{i}" for i in range(c["dims"])]
    if c["dynamic"] == "all":
        names_x[0] = names_g[0] = "n"
        names_x[1] = "c"
    elem = ELEM[c["dtype"]]
    m = model(
        [node("GridSample", ["x", "grid"], ["y"], name="/GridSample", mode=c["mode"], padding_mode=c["padding"],
              align_corners=c["align"])],
        [inp("x", elem, names_x), inp("grid", elem, names_g)], [out("y", elem, [*names_x[:2], *names_g[1:-1]])], opset=c["opset"],
    )
    rng = np.random.default_rng(c["seed"])
    x = rng.uniform(-1, 1, x_dims).astype(c["dtype"])
    grid = rng.uniform(-1.5, 1.5, g_dims)
    if c["ties"]:  # multiples of 1/16: half-pixel ties for nearest, exact taps for linear/cubic
        grid = np.round(grid * 16) / 16
    feeds = {"x": x, "grid": grid.astype(c["dtype"])}
    tol = 2e-3 if c["dtype"] == np.float16 else 1e-5
    result = check_rewrite(m, NAME, feeds, atol=tol, rtol=tol)
    assert "GridSample" not in _ops(result.model)


@settings(max_examples=40, deadline=None)
@given(c=configs())
def test_random_gridsample_equals_onnxruntime(c):
    _check_config(c)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(c=configs())
def test_random_gridsample_equals_onnxruntime_slow(c):
    _check_config(c)
