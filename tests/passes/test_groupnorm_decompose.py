"""groupnorm-decompose: fixtures, ONNX GroupNormalization node cases, random configurations, version boundaries.

Opset-18..20 models are built without onnx's checker (it rejects the deprecated op, onnxruntime
still runs it). Every result is also compared with a float64 numpy reference, and the rewritten
model runs with onnxruntime's graph optimisations off.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, init, inp, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.verify.inputs import make_inputs
from tests.helpers.normalization import assert_close, ops, plain_run
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

NAME = "groupnorm-decompose"
FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "groupnorm_decompose"}
ELEM = {np.float32: FLOAT, np.float16: FLOAT16}
TOL = {np.float32: 1e-5, np.float16: 4e-3}


def reference(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, groups: int, eps: float, per_channel: bool) -> np.ndarray:
    """float64 GroupNorm; per-group scale/bias (opset 18) are repeated for the channels of each group."""
    n, c = x.shape[:2]
    xg = x.astype(np.float64).reshape(n, groups, -1)
    d = xg - xg.mean(-1, keepdims=True)
    y = (d / np.sqrt((d * d).mean(-1, keepdims=True) + eps)).reshape(x.shape)
    if not per_channel:
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    col = (c,) + (1,) * (x.ndim - 2)
    return y * scale.astype(np.float64).reshape(col) + bias.astype(np.float64).reshape(col)


def gn_model(shape, groups, eps, dtype, opset, dynamic, weights_as_inputs, seed=0):
    c = shape[1]
    per = c if opset >= 21 else groups
    r = np.random.default_rng(seed)
    scale, bias = (1 + 0.5 * r.standard_normal(per)).astype(dtype), (0.5 * r.standard_normal(per)).astype(dtype)
    dims = [f"d{i}" if dynamic and i != 1 else d for i, d in enumerate(shape)]
    inputs = [inp("x", ELEM[dtype], dims)]
    inits = []
    if weights_as_inputs:
        inputs += [inp("scale", ELEM[dtype], [per]), inp("bias", ELEM[dtype], [per])]
    else:
        inits = [init("scale", scale), init("bias", bias)]
    graph = helper.make_graph([node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=groups, epsilon=eps)],
                              "gn", inputs, [out("y", ELEM[dtype], dims)], inits)
    opsets = [helper.make_opsetid("", opset)]
    m = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    return m, scale, bias


# ------------------------------------------------------------------ fixtures
@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, NAME, atol=1e-5, rtol=1e-5, seed=5)
    assert "GroupNormalization" not in ops(result.model)
    feeds = make_inputs(fx.build(), fx.input_shapes, fx.val_range, seed=5)[0]
    assert_close(plain_run(result.model, feeds), ort_run(fx.build(), feeds), 1e-5)


# ----------------------------------------------------------- ONNX node cases
@pytest.mark.parametrize("case", node_cases("GroupNormalization"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 21)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        result = check_rewrite(m, NAME, feeds, atol=1e-5, rtol=1e-5)
        assert "GroupNormalization" not in ops(result.model)
        assert_close(plain_run(result.model, feeds), list(expected), 1e-5)


# -------------------------------------------------------- per-group vs per-channel
def test_opset18_scale_is_per_group():
    m, scale, bias = gn_model((2, 6, 5), 3, 1e-5, np.float32, 18, False, False)
    x = np.random.default_rng(1).standard_normal((2, 6, 5)).astype(np.float32)
    result = check_rewrite(m, NAME, {"x": x}, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(plain_run(result.model, {"x": x})[0], reference(x, scale, bias, 3, 1e-5, False), atol=1e-5, rtol=1e-5)


# -------------------------------------------------------- random configurations
@st.composite
def configs(draw):
    rank = draw(st.integers(3, 5))
    groups = draw(st.integers(1, 6))
    shape = (draw(st.integers(1, 3)), groups * draw(st.integers(1, 4)), *draw(st.lists(st.integers(1, 6), min_size=rank - 2, max_size=rank - 2)))
    return {
        "shape": shape, "groups": groups, "eps": draw(st.sampled_from([1e-6, 1e-5, 1e-2])),
        "dtype": draw(st.sampled_from([np.float32, np.float16])), "opset": draw(st.sampled_from([18, 21])),
        "dynamic": draw(st.booleans()), "weights_as_inputs": draw(st.booleans()),
        "trt": draw(st.sampled_from([None, "8.5", "10.1"])), "offset": draw(st.sampled_from([0.0, 4.0])),
    }


def _needed(cfg: dict, trt: str | None) -> bool:
    """What the rules say for 8.5 / 10.1: no importer; per-channel affine (opset 21, C != G); one group."""
    c, groups = cfg["shape"][1], cfg["groups"]
    return trt in (None, "8.5") or (cfg["opset"] >= 21 and c != groups) or (groups == 1 and c != 1)


def _check_random(cfg: dict) -> None:
    trt, offset, dtype = cfg.pop("trt"), cfg.pop("offset"), cfg["dtype"]
    m, scale, bias = gn_model(**cfg)
    x = (offset + 2 * np.random.default_rng(sum(cfg["shape"])).standard_normal(cfg["shape"])).astype(dtype)
    feeds = {"x": x, "scale": scale, "bias": bias} if cfg["weights_as_inputs"] else {"x": x}
    per_channel = cfg["opset"] >= 21
    result = passes.get(NAME).apply(m, trt=trt)
    if not _needed(cfg, trt):
        assert result.rewritten == 0 and ops(result.model) == ["GroupNormalization"]
        return
    assert result.rewritten == 1 and "GroupNormalization" not in ops(result.model)
    if cfg["opset"] >= 18 and trt != "10.1":
        assert "ReduceMean" not in ops(result.model)
    got = plain_run(result.model, feeds)[0]
    assert got.dtype == dtype and got.shape == x.shape
    want = reference(x, scale, bias, cfg["groups"], cfg["eps"], per_channel)
    tol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, atol=tol, rtol=tol)
    if dtype == np.float32 and offset == 0.0:
        # onnxruntime runs the op's function body, E[x^2] - E[x]^2, which loses digits on tiny
        # groups and offset data: the float64 reference above is the oracle, this a sanity check
        np.testing.assert_allclose(got, ort_run(m, feeds)[0], atol=1e-3, rtol=1e-3)


@settings(max_examples=40, deadline=None)
@given(cfg=configs())
def test_random_groupnorm_equals_reference(cfg):
    _check_random(cfg)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(cfg=configs())
def test_random_groupnorm_equals_reference_slow(cfg):
    _check_random(cfg)


# ----------------------------------------------------------- version boundaries
@pytest.mark.parametrize("trt,rewritten", [
    ("8.0", True), ("8.5", True), ("8.6", True), ("10.1", True), ("10.8", True), ("10.9", False), ("10.12", False), ("11.1", False),
])
def test_per_channel_boundary(trt, rewritten):
    result = passes.get(NAME).apply(FIXTURES["unet_groupnorm"].build(), trt=trt)
    assert ("GroupNormalization" not in ops(result.model)) is rewritten


@pytest.mark.parametrize("trt,rewritten", [("8.5", True), ("8.6", False), ("10.1", False), ("11.1", False)])
def test_one_group_per_channel_boundary(trt, rewritten):
    """wav2vec2's GroupNorm(C, C) at opset 21: per-channel scale is per-group, only the importer matters."""
    result = passes.get(NAME).apply(FIXTURES["wav2vec2_feature_groupnorm"].build(), trt=trt)
    assert ("GroupNormalization" not in ops(result.model)) is rewritten


@pytest.mark.parametrize("trt,rule,certain", [
    ("8.5", "no-importer", True), ("8.6", "outside-limits", True), ("10.12", "wrong-results", False),
    ("10.16", "wrong-results", True), ("11.1", "wrong-results", True),
])
def test_single_group_boundary(trt, rule, certain):
    """GroupNorm(1, C): rewritten everywhere; from 10.9 on only the instance-norm bug is the reason."""
    m = FIXTURES["poolformer_groupnorm1"].build()
    assert "GroupNormalization" not in ops(passes.get(NAME).apply(m, trt=trt).model)
    found = [f for f in check_model(m, trt).findings if f.op == "GroupNormalization"]
    assert found and found[0].fix_pass == NAME and found[0].rule == rule and found[0].certain is certain


@pytest.mark.parametrize("trt,rewritten", [("8.5", True), ("8.6", False), ("10.1", False), ("10.8", False)])
def test_opset18_boundary(trt, rewritten):
    m, _, _ = gn_model((1, 8, 4, 4), 4, 1e-5, np.float32, 18, False, False)
    assert ("GroupNormalization" not in ops(passes.get(NAME).apply(m, trt=trt).model)) is rewritten


@pytest.mark.parametrize("trt,reduce", [("8.6", "ReduceSum"), ("9.3", "ReduceSum"), ("10.1", "ReduceMean")])
def test_reduce_form_follows_the_target(trt, reduce):
    fx = FIXTURES["unet_groupnorm_dynamic"]
    feeds = make_inputs(fx.build(), fx.input_shapes, seed=4)[0]
    result = check_rewrite(fx.build(), NAME, feeds, atol=1e-5, rtol=1e-5, trt=trt)
    other = "ReduceMean" if reduce == "ReduceSum" else "ReduceSum"
    assert reduce in ops(result.model) and other not in ops(result.model)
    assert_close(plain_run(result.model, feeds), ort_run(fx.build(), feeds), 1e-5)


@pytest.mark.parametrize("version", ["8.0", "8.2", "8.5"])
@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_rewritten_model_is_imported(fx, version):
    before = check_model(fx.build(), version)
    assert any(f.rule == "no-importer" and f.op == "GroupNormalization" for f in before.findings)
    after = check_model(passes.get(NAME).apply(fx.build(), trt=version).model, version)
    assert not [f for f in after.findings if f.rule == "no-importer"], after.as_dict()


def test_unknown_rank_per_channel_is_a_finding():
    m, _, _ = gn_model((1, 4, 3), 2, 1e-5, np.float32, 21, False, False)
    m.graph.input[0].type.tensor_type.ClearField("shape")
    m.graph.output[0].type.tensor_type.ClearField("shape")
    result = passes.get(NAME).apply(m)
    assert result.rewritten == 0 and "rank is unknown" in result.findings[0].message


@pytest.mark.parametrize("name,version", [
    ("unet_groupnorm", "8.6"), ("unet_groupnorm", "10.1"), ("unet_groupnorm", "10.8"),
    ("poolformer_groupnorm1", "9.3"), ("poolformer_groupnorm1", "10.16"), ("poolformer_groupnorm1", "11.1"),
])
def test_rewritten_model_has_no_blocking_finding(name, version):
    after = check_model(passes.get(NAME).apply(FIXTURES[name].build(), trt=version).model, version)
    assert not [f for f in after.findings if f.rule in ("no-importer", "outside-limits", "wrong-results")], after.as_dict()
