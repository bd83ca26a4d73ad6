"""resize-cubic: fixtures, ONNX Resize cubic node cases, random configurations vs onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import DOUBLE, FLOAT, FLOAT16, INT64, init, inp, model, node, out
from graphfix import passes
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

NAME = "resize-cubic"
FIXTURES = [fx for group, fx in all_fixtures() if group == "resize_cubic"]
#: What the rewrite may add: each is imported by TensorRT 7.0.
ALLOWED = {"MatMul", "Transpose", "Add", "Cast", "Identity"}
#: ... and the runtime-size Gather form: each imported by TensorRT 7.0 as well.
RUNTIME_ALLOWED = ALLOWED | {"Abs", "Div", "Equal", "Floor", "Gather", "Greater", "Max", "Min", "Mul", "Range", "ReduceSum",
                             "Reshape", "Shape", "Slice", "Sub", "Unsqueeze"}
ELEM = {np.float32: FLOAT, np.float16: FLOAT16, np.float64: DOUBLE}
MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"]


def _ops(m: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in m.graph.node}


def _cubic(m: onnx.ModelProto) -> list[str]:
    return [n.name for n in m.graph.node if n.op_type == "Resize" and any(a.name == "mode" and a.s == b"cubic" for a in n.attribute)]


def _resize(x_dims, *, scales=None, sizes=None, roi=None, opset=13, dtype=np.float32, out_dims=None, **attrs):
    """One cubic Resize with constant roi/scales/sizes (initializers, as exports fold them)."""
    inits, names = [], ["x", "", "", ""]
    for k, (key, value, typ) in enumerate((("roi", roi, np.float32), ("scales", scales, np.float32), ("sizes", sizes, np.int64)), 1):
        if value is not None:
            inits.append(init(key, np.asarray(value, typ)))
            names[k] = key
    while names[-1] == "":
        names.pop()
    if opset < 13:  # roi and scales are required inputs before opset 13: empty tensors stand in
        for k, key in ((1, "roi"), (2, "scales")):
            if k < len(names) and names[k] == "":
                inits.append(init(key, np.zeros(0, np.float32)))
                names[k] = key
    elem = ELEM[dtype]
    return model([node("Resize", names, ["y"], name="/Resize", mode="cubic", **attrs)], [inp("x", elem, x_dims)],
                 [out("y", elem, out_dims or [f"o{i}" for i in range(len(x_dims))])], inits, opset=opset)


# ------------------------------------------------------------------ fixtures
@pytest.mark.parametrize("fx", [f for f in FIXTURES if not f.finding], ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, NAME, atol=1e-5, rtol=1e-5, seed=4)
    assert not _cubic(result.model) and "Resize" not in _ops(result.model)
    assert _ops(result.model) - _ops(fx.build()) <= (RUNTIME_ALLOWED if fx.name == "dynamic_image_size" else ALLOWED)
    for version in ("7.0", "8.2", "8.4", "8.5", "10.1"):
        findings = check_model(result.model, version).findings
        assert not [f for f in findings if f.fix_pass == NAME or f.error_id == "resize-cubic"], (version, findings)
        assert not [f for f in findings if f.severity == "blocking" and f.rule != "opset"], (version, findings)


def test_check_reports_cubic_before_8_5_only():
    fx = next(f for f in FIXTURES if f.name == "vit_pos_embed")
    for version, expected in (("7.0", True), ("8.2", True), ("8.4", True), ("8.4.3", True), ("8.5", False), ("10.1", False)):
        found = [f for f in check_model(fx.build(), version).findings if f.fix_pass == NAME]
        assert bool(found) is expected, (version, found)
        assert all(f.error_id == "resize-cubic" and f.severity == "blocking" for f in found)


def test_pos_embed_is_two_matmuls():
    fx = next(f for f in FIXTURES if f.name == "vit_pos_embed")
    result = passes.get(NAME).apply(fx.build(), trt="8.2")
    assert result.rewritten == 1
    assert sum(1 for n in result.model.graph.node if n.op_type == "MatMul") == 2


def test_runtime_size_gather_form():
    """DINOv2 at a dynamic image size: the grid size is computed from the image's H/W; the 4-tap
    Gather form equals onnxruntime at several sizes and leaves nothing 7.0-10.1 blocks."""
    fx = next(f for f in FIXTURES if f.name == "dynamic_image_size")
    m = fx.build()
    grid = np.random.default_rng(0).standard_normal((1, 8, 4, 4)).astype(np.float32)
    for hw in ((56, 70), (224, 168), (14, 14)):
        result = check_rewrite(m, NAME, {"pixels": np.zeros((1, 3, *hw), np.float32), "pos_grid": grid}, atol=1e-5, rtol=1e-5)
    assert not _cubic(result.model) and _ops(result.model) - _ops(m) <= RUNTIME_ALLOWED
    assert sum(1 for n in result.model.graph.node if n.op_type == "Gather" and n.name.startswith("/Resize")) == 2
    for version in ("7.0", "8.0", "8.2", "8.4", "8.5", "10.1"):
        assert not [f for f in check_model(result.model, version).findings if f.severity == "blocking" and f.rule != "opset"], version


def test_runtime_findings():
    fractional = _resize([1, 2, "H", "W"], scales=[1, 1, 1.5, 1.5])
    assert "non-integer scale" in passes.get(NAME).apply(fractional).findings[0].message
    crop = model([node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="cubic", coordinate_transformation_mode="tf_crop_and_resize")],
                 [inp("x", FLOAT, [1, 1, 4, 4]), inp("sizes", INT64, [4])], [out("y", FLOAT, list("abcd"))],
                 [init("roi", np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32))], opset=13)
    assert "tf_crop_and_resize" in passes.get(NAME).apply(crop).findings[0].message
    runtime = model([node("Resize", ["x", "", "scales"], ["y"], mode="cubic")], [inp("x", FLOAT, [1, 1, 4, 4]), inp("scales", FLOAT, [4])],
                    [out("y", FLOAT, list("abcd"))], opset=13)
    assert "runtime scales" in passes.get(NAME).apply(runtime).findings[0].message


@st.composite
def runtime_configs(draw):
    return {
        "dims": [draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 9))],
        "out": [draw(st.integers(1, 12)), draw(st.integers(1, 12))], "by": draw(st.sampled_from(["sizes", "scales"])),
        "factor": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        "mode": draw(st.sampled_from(["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])),
        "a": draw(st.sampled_from([-0.75, -0.5])), "exclude": draw(st.integers(0, 1)), "opset": draw(st.sampled_from([11, 13, 18])),
    }


@settings(max_examples=40, deadline=None)
@given(c=runtime_configs())
def test_random_runtime_sizes_equal_onnxruntime(c):
    _check_runtime(c)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(c=runtime_configs())
def test_random_runtime_sizes_equal_onnxruntime_slow(c):
    _check_runtime(c)


def _check_runtime(c):
    """sizes as a graph input (nothing known: every axis goes through the Gather form, N and C at
    scale 1) or integer scales on dynamic H/W."""
    attrs = {"mode": "cubic", "coordinate_transformation_mode": c["mode"], "cubic_coeff_a": c["a"], "exclude_outside": c["exclude"]}
    n, ch, h, w = c["dims"]
    if c["by"] == "sizes":
        m = model([node("Resize", ["x", "roi", "scales", "sizes"], ["y"], **attrs)], [inp("x", FLOAT, ["N", "C", "H", "W"]), inp("sizes", INT64, [4])],
                  [out("y", FLOAT, list("abcd"))], [init("roi", np.zeros(0, np.float32)), init("scales", np.zeros(0, np.float32))], opset=c["opset"])
        feeds = {"sizes": np.array([n, ch, *c["out"]], np.int64)}
    else:
        m = model([node("Resize", ["x", "roi", "scales"], ["y"], **attrs)], [inp("x", FLOAT, ["N", ch, "H", "W"])], [out("y", FLOAT, list("abcd"))],
                  [init("roi", np.zeros(0, np.float32)), init("scales", np.array([1, 1, *c["factor"]], np.float32))], opset=c["opset"])
        feeds = {}
    feeds["x"] = np.random.default_rng(1).uniform(-1, 1, (n, ch, h, w)).astype(np.float32)
    result = check_rewrite(m, NAME, feeds, atol=1e-5, rtol=1e-5)
    assert not _cubic(result.model)


def test_left_alone_from_8_5_and_linear_untouched():
    m = _resize([1, 2, 4, 4], scales=[1, 1, 2, 2])
    assert passes.get(NAME).apply(m, trt="8.5").rewritten == 0
    assert passes.get(NAME).apply(m, trt="8.4").rewritten == 1
    linear = model([node("Resize", ["x", "", "scales"], ["y"], mode="linear")], [inp("x", FLOAT, [1, 2, 4, 4])],
                   [out("y", FLOAT, list("abcd"))], [init("scales", np.array([1, 1, 2, 2], np.float32))], opset=13)
    assert passes.get(NAME).apply(linear).matched == 0


def test_dynamic_batch_sizes_from_shape():
    """sizes = Concat(Shape(x)[0:2], [7, 3]) with a dynamic batch: the batch axis keeps its length."""
    nodes = [
        node("Shape", ["x"], ["s"]), node("Slice", ["s", "zero", "two"], ["nc"]),
        node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic", coordinate_transformation_mode="pytorch_half_pixel"),
    ]
    m = model(nodes, [inp("x", FLOAT, ["N", 3, 5, 4])], [out("y", FLOAT, ["N", 3, 7, 3])],
              [init("zero", np.array([0], np.int64)), init("two", np.array([2], np.int64)), init("hw", np.array([7, 3], np.int64))])
    x = np.random.default_rng(0).standard_normal((3, 3, 5, 4)).astype(np.float32)
    check_rewrite(m, NAME, {"x": x}, atol=1e-5, rtol=1e-5)


def test_findings():
    shape_dynamic = _resize([1, 2, "H", 4], scales=[1, 1, 2, 2])  # integer scale: the runtime form
    assert passes.get(NAME).apply(shape_dynamic).rewritten == 1
    runtime = model([node("Resize", ["x", "", "scales"], ["y"], mode="cubic")], [inp("x", FLOAT, [1, 1, 4, 4]), inp("scales", FLOAT, [4])],
                    [out("y", FLOAT, list("abcd"))], opset=13)
    assert "runtime" in passes.get(NAME).apply(runtime).findings[0].message


def test_tf_crop_and_resize_extrapolation():
    m = _resize([1, 1, 5, 6], roi=[0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], sizes=[1, 1, 4, 7],
                coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5)
    x = np.random.default_rng(1).standard_normal((1, 1, 5, 6)).astype(np.float32)
    result = check_rewrite(m, NAME, {"x": x}, atol=1e-5, rtol=1e-5)
    assert "Add" in _ops(result.model)


def test_opset18_axes_and_keep_aspect_ratio():
    for policy in ("not_larger", "not_smaller"):
        m = _resize([2, 3, 6, 9], sizes=[8, 8], opset=18, axes=[2, 3], keep_aspect_ratio_policy=policy)
        x = np.random.default_rng(2).standard_normal((2, 3, 6, 9)).astype(np.float32)
        check_rewrite(m, NAME, {"x": x}, atol=1e-5, rtol=1e-5)
    m = _resize([2, 6, 9, 3], scales=[1.5, 2.0], opset=18, axes=[-2, 1])  # NHWC upscale, axes out of order
    x = np.random.default_rng(3).standard_normal((2, 6, 9, 3)).astype(np.float32)
    check_rewrite(m, NAME, {"x": x}, atol=1e-5, rtol=1e-5)


def test_opset11():
    m = _resize([1, 2, 3, 5], scales=[1, 1, 2.5, 0.6], opset=11)
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 5)).astype(np.float32)
    check_rewrite(m, NAME, {"x": x}, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dims,scales,dtype", [
    ([2, 5, 3], [1, 1.6, 2], np.float32),  # 3-D, onnxruntime's cubic kernel refuses
    ([1, 4, 3, 5, 6], [1, 1, 1.5, 0.8, 1.5], np.float32),  # 5-D, three axes
    ([1, 2, 6, 7], [1, 1, 2, 0.5], np.float64),  # no float64 cubic Resize in onnxruntime
    ([1, 2, 6, 7], [1, 1, 1.5, 2], np.float16),
])
def test_against_onnx_reference(dims, scales, dtype):
    """What onnxruntime cannot run, checked against the ONNX reference implementation."""
    from onnx.reference import ReferenceEvaluator

    m = _resize(dims, scales=scales, dtype=dtype, opset=13)
    x = np.random.default_rng(6).uniform(-1, 1, dims).astype(dtype)
    result = passes.get(NAME).apply(m)
    assert result.rewritten == 1 and not _cubic(result.model)
    expected = ReferenceEvaluator(m).run(None, {"x": x})[0]
    got = ort_run(result.model, {"x": x})[0]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    tol = {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-7}[dtype]
    np.testing.assert_allclose(got, expected, atol=tol, rtol=tol)


def test_identity_when_every_scale_is_one():
    m = _resize([1, 2, 4, 4], scales=[1, 1, 1, 1], coordinate_transformation_mode="tf_half_pixel_for_nn", opset=11)
    x = np.random.default_rng(5).standard_normal((1, 2, 4, 4)).astype(np.float32)
    result = check_rewrite(m, NAME, {"x": x})
    assert "MatMul" not in _ops(result.model)


# ------------------------------------------------------------------ ONNX node cases
CASES = node_cases("Resize")
#: Cases whose expected output onnxruntime (the verification reference) does not reproduce: the ONNX
#: reference takes align_corners' resized length as in * scale (3.2), onnxruntime as the output size (3).
ORT_DIVERGES = {"test_resize_downsample_scales_cubic_align_corners"}
CUBIC_CASES = [c for c in CASES if any(a.name == "mode" and a.s == b"cubic" for a in c.model.graph.node[0].attribute)]


def test_node_cases_found():
    assert len(CUBIC_CASES) >= 9


@pytest.mark.parametrize("case", CUBIC_CASES, ids=lambda c: c.name)
def test_onnx_node_cases(case):
    """Each official cubic case with its scales/sizes frozen (exports have them constant): the
    rewrite equals onnxruntime and the expected output."""
    for inputs, expected in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        m = freeze_inputs(runnable(case.model, 18), {k: feeds.pop(k) for k in list(feeds) if k != "X"})
        result = check_rewrite(m, NAME, feeds, atol=1e-5, rtol=1e-5)
        assert not _cubic(result.model)
        close = np.allclose(ort_run(result.model, feeds)[0], expected[0], atol=1e-4, rtol=1e-4)
        assert close is (case.name not in ORT_DIVERGES)


# ------------------------------------------------------------------ random configurations
@st.composite
def configs(draw):
    """What onnxruntime's cubic kernel runs: 2-D, 4-D resizing H/W, or 4-D NHWC upscaling H/W."""
    rank = draw(st.sampled_from([4, 4, 2]))
    dims = draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank))
    layout = "any" if rank == 2 else draw(st.sampled_from(["nchw", "nchw", "nhwc"]))
    candidates = {"any": [0, 1], "nchw": [2, 3], "nhwc": [1, 2]}[layout]
    resized = sorted(draw(st.sets(st.sampled_from(candidates), min_size=1, max_size=2)))
    opset = draw(st.sampled_from([11, 13, 18, 19]))
    antialias = opset >= 18 and draw(st.booleans())
    targets = {k: draw(st.integers(dims[k] if layout == "nhwc" and not antialias else 1, 12)) for k in resized}
    mode = draw(st.sampled_from(MODES))
    if mode == "tf_half_pixel_for_nn" and opset >= 13:
        mode = "half_pixel"  # deprecated from opset 13
    return {
        "dims": dims, "resized": resized, "by": draw(st.sampled_from(["scales", "sizes"])), "targets": targets, "mode": mode,
        "opset": opset, "a": draw(st.sampled_from([-0.75, -0.5, -0.6])), "exclude": draw(st.integers(0, 1)),
        "axes": opset >= 18 and draw(st.booleans()),
        "symmetric": opset >= 19 and mode == "half_pixel" and draw(st.booleans()),
        "roi": draw(st.lists(st.floats(-0.3, 1.3), min_size=2, max_size=2)),
        "extrapolation": draw(st.sampled_from([0.0, -1.0])), "seed": draw(st.integers(0, 2**16)), "antialias": antialias,
    }


def _check_config(c):
    rank, dims = len(c["dims"]), c["dims"]
    axes = c["resized"] if c["axes"] else list(range(rank))
    attrs = {"coordinate_transformation_mode": "half_pixel_symmetric" if c["symmetric"] else c["mode"],
             "cubic_coeff_a": c["a"], "exclude_outside": c["exclude"]}
    if c["axes"]:
        attrs["axes"] = axes
    if c["antialias"]:
        attrs["antialias"] = 1
    kw = {}
    if c["by"] == "sizes":
        kw["sizes"] = [c["targets"].get(k, dims[k]) for k in axes]
    else:
        kw["scales"] = [np.float32(c["targets"][k] / dims[k]) if k in c["targets"] else 1.0 for k in axes]
    if c["mode"] == "tf_crop_and_resize":
        lo, hi = c["roi"]
        kw["roi"] = [lo if k in c["targets"] else 0.0 for k in axes] + [hi if k in c["targets"] else 1.0 for k in axes]
        attrs["extrapolation_value"] = c["extrapolation"]
    m = _resize(dims, opset=c["opset"], **kw, **attrs)
    x = np.random.default_rng(c["seed"]).uniform(-1, 1, dims).astype(np.float32)
    result = passes.get(NAME).apply(m)
    if result.findings:  # only the ambiguous float32 output size may be left, and it says so
        assert "ambiguous" in result.findings[0].message, result.findings
        return
    result = check_rewrite(m, NAME, {"x": x}, atol=1e-5, rtol=1e-5)
    assert not _cubic(result.model)


@settings(max_examples=60, deadline=None)
@given(c=configs())
def test_random_resize_equals_onnxruntime(c):
    _check_config(c)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(c=configs())
def test_random_resize_equals_onnxruntime_slow(c):
    _check_config(c)


