"""col2im-to-convtranspose: fixtures, ONNX Col2Im node cases, random fold geometries."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphfix
from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT32, INT64, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.onnxio.ir import runtime_compatible
from graphfix.trt import support
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    freeze_inputs,
    node_cases,
    ort_run,
    remaining_matches,
    runnable,
)

NAME = "col2im-to-convtranspose"
FIXTURES = [fx for group, fx in all_fixtures() if group == "col2im_to_convtranspose"]


def _blocks(image, block, dil, pads, strides):
    d = len(image)
    return [(image[i] + pads[i] + pads[i + d] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(d)]


def _col2im(x, image, block, dil, pads, strides):
    """Direct scatter-add: block element (k...) of block (b...) lands at b*stride + k*dilation - pad."""
    d, k = len(image), int(np.prod(block))
    n, ck, _ = x.shape
    grid = _blocks(image, block, dil, pads, strides)
    canvas = np.zeros([n, ck // k, *(image[i] + pads[i] + pads[i + d] for i in range(d))], np.float64)
    cols = x.reshape(n, ck // k, k, *grid)
    for j, tap in enumerate(itertools.product(*(range(v) for v in block))):
        where = tuple(slice(tap[i] * dil[i], tap[i] * dil[i] + strides[i] * (grid[i] - 1) + 1, strides[i]) for i in range(d))
        canvas[(slice(None), slice(None), *where)] += cols[:, :, j]
    return canvas[(slice(None), slice(None), *(slice(pads[i], pads[i] + image[i]) for i in range(d)))].astype(x.dtype)


def _fold_model(image, block, dil, pads, strides, batch=1, channels=2, dynamic=False):
    k, length = int(np.prod(block)), int(np.prod(_blocks(image, block, dil, pads, strides)))
    dims = ["n", "ck", "l"] if dynamic else [batch, channels * k, length]
    m = model(
        [node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], name="/Col2Im", dilations=dil, pads=pads, strides=strides)],
        [inp("x", FLOAT, dims)], [out("y", FLOAT, ["n" if dynamic else batch, "c" if dynamic else channels, *image])],
        [init("image_shape", image, np.int64), init("block_shape", block, np.int64)], opset=18,
    )
    return m, (batch, channels * k, length)


def _ops(m: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in m.graph.node}


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, NAME, atol=1e-5, rtol=1e-5, seed=2)
    assert "Col2Im" not in _ops(result.model) and "ConvTranspose" in _ops(result.model)
    for version in ("8.0", "8.2", "8.4", "10.1", "11.1"):
        findings = check_model(result.model, version).findings
        assert not [f for f in findings if f.rule == "no-importer" or f.severity == "blocking"], (version, findings)


def test_kernel_does_not_depend_on_channels():
    m, _ = _fold_model([12, 12], [3, 3], [1, 1], [1, 1, 1, 1], [2, 2], channels=64)
    result = passes.get(NAME).apply(m)
    conv = next(n for n in result.model.graph.node if n.op_type == "ConvTranspose")
    weight = next(t for t in result.model.graph.initializer if t.name == conv.input[1])
    assert list(weight.dims) == [9, 1, 3, 3]
    assert all(a.name != "group" or a.i == 1 for a in conv.attribute)


@pytest.mark.parametrize("version", [v for v in support.versions() if "-" not in v])
def test_every_release_needs_it(version):
    m, shape = _fold_model([6, 5], [2, 2], [1, 1], [0, 0, 0, 0], [1, 1])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    result = passes.get(NAME).apply(m, trt=version)
    assert result.rewritten == 1 and remaining_matches(result.model, NAME) == []
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], ort_run(m, {"x": x})[0], atol=1e-6)


def test_findings():
    dynamic = model(
        [node("Col2Im", ["x", "image_shape", "block_shape"], ["y"])],
        [inp("x", FLOAT, [1, 8, 12]), inp("image_shape", INT64, [2])], [out("y", FLOAT, [1, 2, "h", "w"])],
        [init("block_shape", [2, 2], np.int64)], opset=18,
    )
    assert "must be constants" in passes.get(NAME).apply(dynamic).findings[0].message
    four_d, _ = _fold_model([3, 3, 3, 3], [2, 2, 2, 2], [1] * 4, [0] * 8, [1] * 4)
    assert "at most 3-D" in passes.get(NAME).apply(four_d).findings[0].message
    ints = model(
        [node("Col2Im", ["x", "image_shape", "block_shape"], ["y"])], [inp("x", INT32, [1, 8, 12])],
        [out("y", INT32, [1, 2, 4, 5])], [init("image_shape", [4, 5], np.int64), init("block_shape", [2, 2], np.int64)], opset=18,
    )
    assert "non-float" in passes.get(NAME).apply(ints).findings[0].message


def test_3d_asymmetric_padding_is_cropped():
    """TensorRT <= 8.2 rejects asymmetric 3-D deconvolution padding: Slice a canvas instead."""
    image, block, dil, pads, strides = [5, 6, 7], [2, 2, 3], [1, 1, 1], [1, 0, 1, 0, 1, 2], [2, 1, 2]
    m, shape = _fold_model(image, block, dil, pads, strides)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    result = check_rewrite(m, NAME, {"x": x}, atol=1e-5, rtol=1e-5)
    conv = next(n for n in result.model.graph.node if n.op_type == "ConvTranspose")
    assert not any(a.name in ("pads", "output_padding") for a in conv.attribute) and "Slice" in _ops(result.model)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], _col2im(x, image, block, dil, pads, strides), atol=1e-5)


@pytest.mark.parametrize("case", node_cases("Col2Im"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 18)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        shapes = {name: feeds.pop(name) for name in list(m.graph.node[0].input[1:3])}
        frozen = freeze_inputs(m, shapes)
        result = check_rewrite(frozen, NAME, feeds)
        assert "Col2Im" not in _ops(result.model)
        np.testing.assert_allclose(ort_run(result.model, feeds)[0], expected[0], rtol=1e-6)


# ------------------------------------------------------------------ random geometries
@st.composite
def geometries(draw):
    dims = draw(st.sampled_from([1, 2, 2, 2, 3]))
    block = draw(st.lists(st.integers(1, 4), min_size=dims, max_size=dims))
    dil = draw(st.lists(st.integers(1, 3), min_size=dims, max_size=dims))
    strides = draw(st.lists(st.integers(1, 3), min_size=dims, max_size=dims))
    pads = draw(st.lists(st.integers(0, 2), min_size=2 * dims, max_size=2 * dims))
    image = []
    for i in range(dims):  # at least one block fits
        need = max(dil[i] * (block[i] - 1) + 1 - pads[i] - pads[i + dims], 1)
        image.append(draw(st.integers(need, need + (5 if dims < 3 else 3))))
    return {"image": image, "block": block, "dil": dil, "pads": pads, "strides": strides,
            "batch": draw(st.integers(1, 2)), "channels": draw(st.integers(1, 3)), "dynamic": draw(st.booleans()),
            "seed": draw(st.integers(0, 2**16))}


def _check_geometry(g):
    args = (g["image"], g["block"], g["dil"], g["pads"], g["strides"])
    m, shape = _fold_model(*args, batch=g["batch"], channels=g["channels"], dynamic=g["dynamic"])
    x = np.random.default_rng(g["seed"]).uniform(-1, 1, shape).astype(np.float32)
    if len(g["image"]) == 2 or all(d == 1 for d in g["dil"]):
        result = check_rewrite(m, NAME, {"x": x}, atol=1e-5, rtol=1e-5)  # against onnxruntime's Col2Im
    else:  # onnxruntime's non-2-D Col2Im is wrong with dilations > 1: compare with the direct scatter-add
        result = passes.get(NAME).apply(m)
        assert result.rewritten == 1
        onnx.checker.check_model(runtime_compatible(result.model), full_check=True)
    assert "Col2Im" not in _ops(result.model)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], _col2im(x, *args), atol=1e-5, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(g=geometries())
def test_random_fold_geometry(g):
    _check_geometry(g)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(g=geometries())
def test_random_fold_geometry_slow(g):
    _check_geometry(g)


@pytest.mark.parametrize("args", [([9], [3], [2], [0, 0], [1]), ([7, 6, 6], [2, 2, 2], [2, 1, 2], [0] * 6, [1, 1, 1])],
                         ids=["1-D", "3-D"])
def test_verified_where_onnxruntime_col2im_is_wrong(args):
    """onnxruntime misplaces multi-channel 1-D/3-D Col2Im blocks with dilation > 1; verification
    then runs the ONNX reference evaluator, so the correct rewrite is kept, not rolled back."""
    from graphfix.verify import sessions

    m, shape = _fold_model(*args, batch=1, channels=2, dynamic=False)
    assert sessions._wrong_in_onnxruntime(m) == (not sessions._onnxruntime_col2im_dilation_ok())
    result = graphfix.fix(m, NAME, val_range={"x": (-1.0, 1.0)})
    assert result.report.passes[0].verdict == "kept", result.report.passes[0].reason
    x = np.random.default_rng(5).uniform(-1, 1, shape).astype(np.float32)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], _col2im(x, *args), atol=1e-5, rtol=1e-5)
