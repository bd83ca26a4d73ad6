"""layernorm-decompose: fixtures, ONNX LayerNormalization node cases, random configurations, version boundaries.

onnxruntime fuses the decomposed pattern back into its LayerNormalization kernel, so every
comparison also runs the rewritten model with graph optimisations off: the decomposition's own
arithmetic is what is checked.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.verify.inputs import make_inputs
from tests.helpers.normalization import assert_close, ops, plain_run
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run

NAME = "layernorm-decompose"
FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "layernorm_decompose"}
ELEM = {np.float32: FLOAT, np.float16: FLOAT16}
TOL = {np.float32: 1e-5, np.float16: 2e-3}


def ln_model(shape, axis, eps, dtype, scale_rank, bias, stats, opset, dynamic):
    rank = len(shape)
    first = axis % rank
    dims = [f"d{i}" if dynamic == "all" or (dynamic == "lead" and i < first) else d for i, d in enumerate(shape)]
    r = np.random.default_rng(rank * 31 + first)
    norm_shape = list(shape[first:])[len(shape[first:]) - scale_rank:]
    inits = [init("scale", 1 + 0.3 * r.standard_normal(norm_shape), dtype)]
    inputs = ["x", "scale"]
    if bias:
        inits.append(init("bias", 0.3 * r.standard_normal(norm_shape), dtype))
        inputs.append("bias")
    outputs = ["y", "mean", "inv"] if stats else ["y"]
    stat_dims = dims[:first] + [1] * (rank - first)
    graph_outs = [out("y", ELEM[dtype], dims)] + ([out("mean", FLOAT, stat_dims), out("inv", FLOAT, stat_dims)] if stats else [])
    return model([node("LayerNormalization", inputs, outputs, axis=axis, epsilon=eps)], [inp("x", ELEM[dtype], dims)],
                 graph_outs, inits, opset=opset)


def reference(m: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    """float64 LayerNormalization of the single node in ``m``: Y (standardised in float64, cast to
    X's type, then scaled/shifted as the op says) and the float32 statistics it lists as outputs."""
    n = m.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    axes = tuple(range(attrs.get("axis", -1) % x.ndim, x.ndim))
    xd = x.astype(np.float64)
    mean = xd.mean(axes, keepdims=True)
    std = np.sqrt(((xd - mean) ** 2).mean(axes, keepdims=True) + attrs.get("epsilon", 1e-5))
    y = ((xd - mean) / std).astype(x.dtype).astype(np.float64) * weights[n.input[1]]
    if len(n.input) > 2 and n.input[2]:
        y = y + weights[n.input[2]]
    return [y.astype(x.dtype), mean.astype(np.float32), (1 / std).astype(np.float32)][: len(m.graph.output)]


# ------------------------------------------------------------------ fixtures
@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, NAME, atol=1e-5, rtol=1e-5, seed=5)
    assert "LayerNormalization" not in ops(result.model)
    feeds = make_inputs(fx.build(), fx.input_shapes, fx.val_range, seed=5)[0]
    assert_close(plain_run(result.model, feeds), ort_run(fx.build(), feeds), 1e-5 if "fp16" not in fx.name else 2e-3)


def test_fp16_is_standardised_in_float32_and_cast_back():
    result = passes.get(NAME).apply(FIXTURES["fp16_layernorm"].build())
    graph = result.model.graph
    casts = [n for n in graph.node if n.op_type == "Cast"]
    assert [onnx.helper.get_attribute_value(c.attribute[0]) for c in casts] == [onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16]
    pow_node = next(n for n in graph.node if n.op_type == "Pow")
    exponent = next(t for t in graph.initializer if t.name == pow_node.input[1])
    assert exponent.data_type == onnx.TensorProto.FLOAT  # the square is taken in float32, not fp16


def test_large_mean_is_exact():
    """The two-pass form: a mean of 1e4 with unit variance (E[x^2] - E[x]^2 would lose it all in fp32)."""
    m = ln_model((4, 256), -1, 1e-5, np.float32, 1, True, False, 17, "none")
    x = (1e4 + np.random.default_rng(0).standard_normal((4, 256))).astype(np.float32)
    result = check_rewrite(m, NAME, {"x": x}, atol=1e-3, rtol=1e-3)
    xd = x.astype(np.float64)
    d = xd - xd.mean(-1, keepdims=True)
    scale, bias = (onnx.numpy_helper.to_array(t) for t in m.graph.initializer)
    want = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * scale + bias
    np.testing.assert_allclose(plain_run(result.model, {"x": x})[0], want, atol=5e-3, rtol=5e-3)


# ----------------------------------------------------------- ONNX node cases
@pytest.mark.parametrize("case", node_cases("LayerNormalization"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    weights = {vi.name for vi in case.model.graph.input[1:]}
    for inputs, expected in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        result = check_rewrite(case.model, NAME, feeds, atol=1e-5, rtol=1e-5)
        assert "LayerNormalization" not in ops(result.model)
        assert weights <= {i for n in result.model.graph.node for i in n.input}
        assert_close(plain_run(result.model, feeds), list(expected), 1e-5)


# -------------------------------------------------------- random configurations
@st.composite
def configs(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, rank - 1))
    normalized = rank - axis % rank
    return {
        "shape": shape, "axis": axis, "eps": draw(st.sampled_from([1e-12, 1e-5, 1e-3, 0.1])),
        "dtype": draw(st.sampled_from([np.float32, np.float16])), "scale_rank": draw(st.integers(1, normalized)),
        "bias": draw(st.booleans()), "stats": draw(st.booleans()), "opset": draw(st.sampled_from([17, 18])),
        "dynamic": draw(st.sampled_from(["none", "lead", "all"])), "trt": draw(st.sampled_from([None, "8.5", "10.1"])),
        "offset": draw(st.sampled_from([0.0, 3.0, -20.0])),
    }


def _check_random(cfg: dict) -> None:
    trt, offset = cfg.pop("trt"), cfg.pop("offset")
    m = ln_model(**cfg)
    x = (offset + np.random.default_rng(sum(cfg["shape"])).standard_normal(cfg["shape"]) * 2).astype(cfg["dtype"])
    tol = TOL[cfg["dtype"]]
    # onnxruntime's kernel computes E[x^2] - E[x]^2, which loses digits on offset data: the
    # float64 reference is the oracle, onnxruntime a check at its own accuracy. On offset data the
    # decomposition's float32 mean is off by up to half an ulp of the offset, which every deviation
    # x - mean inherits (5e-5 relative on two close values at -20), so it gets the same 10x.
    ort_tol = tol if offset == 0.0 else 10 * tol
    native = ort_run(m, {"x": x})
    result = passes.get(NAME).apply(m, trt=trt)
    if trt == "10.1" and not cfg["stats"]:
        assert ops(result.model) == ["LayerNormalization"] and result.rewritten == 0
        return
    result = check_rewrite(m, NAME, {"x": x}, atol=ort_tol, rtol=ort_tol, trt=trt, expect_rewrite=False)
    assert result.rewritten == 1
    assert "LayerNormalization" not in ops(result.model)
    if cfg["opset"] >= 18 and trt != "10.1":
        assert "ReduceMean" not in ops(result.model)  # its axes input is ignored before 10.0
    got = plain_run(result.model, {"x": x})
    assert_close(got, reference(m, x), ort_tol)
    assert_close(got, native, ort_tol)


@settings(max_examples=40, deadline=None)
@given(cfg=configs())
def test_random_layernorm_equals_onnxruntime(cfg):
    _check_random(cfg)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(cfg=configs())
def test_random_layernorm_equals_onnxruntime_slow(cfg):
    _check_random(cfg)


# ----------------------------------------------------------- version boundaries
@pytest.mark.parametrize("trt,rewritten", [("7.2", True), ("8.0", True), ("8.4", True), ("8.5", True), ("8.6", False), ("10.1", False), ("11.1", False)])
def test_single_output_boundary(trt, rewritten):
    result = passes.get(NAME).apply(FIXTURES["bert_self_output"].build(), trt=trt)
    assert ("LayerNormalization" not in ops(result.model)) is rewritten


@pytest.mark.parametrize("trt", ["8.6", "9.3", "10.1", "11.1"])
def test_unused_statistics_are_dropped_from_the_native_op(trt):
    fx = FIXTURES["dynamo_layernorm"]
    m = fx.build()
    feeds = make_inputs(m, fx.input_shapes, seed=1)[0]
    result = check_rewrite(m, NAME, feeds, atol=0, rtol=0, trt=trt, expect_rewrite=False)
    assert result.rewritten == 1
    ln = [n for n in result.model.graph.node if n.op_type == "LayerNormalization"]
    assert len(ln) == 1 and list(ln[0].output) == ["layer_norm"]
    assert {a.name: onnx.helper.get_attribute_value(a) for a in ln[0].attribute} == {"axis": -1, "epsilon": pytest.approx(1e-5)}
    assert not [f for f in check_model(result.model, trt).findings if f.op == "LayerNormalization"]


@pytest.mark.parametrize("trt,reduce", [("8.6", "ReduceSum"), ("9.3", "ReduceSum"), ("10.1", "ReduceMean"), ("11.1", "ReduceMean")])
def test_used_statistics_are_decomposed(trt, reduce):
    fx = FIXTURES["layernorm_statistics"]
    m = fx.build()
    feeds = make_inputs(m, fx.input_shapes, seed=2)[0]
    result = check_rewrite(m, NAME, feeds, atol=1e-5, rtol=1e-5, trt=trt)
    assert "LayerNormalization" not in ops(result.model) and reduce in ops(result.model)
    assert_close(plain_run(result.model, feeds), ort_run(m, feeds), 1e-5)


@pytest.mark.parametrize("version", ["8.0", "8.2", "8.5"])
@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_rewritten_model_is_imported(fx, version):
    before = check_model(fx.build(), version)
    assert any(f.rule == "no-importer" and f.op == "LayerNormalization" for f in before.findings)
    after = check_model(passes.get(NAME).apply(fx.build(), trt=version).model, version)
    assert not [f for f in after.findings if f.rule == "no-importer"], after.as_dict()


def test_check_names_the_statistics_limit():
    found = [f for f in check_model(FIXTURES["dynamo_layernorm"].build(), "10.1").findings if f.op == "LayerNormalization"]
    assert found and found[0].rule == "outside-limits" and found[0].fix_pass == NAME


def test_unsupported_stash_type_is_a_finding():
    m = ln_model((2, 8), -1, 1e-5, np.float32, 1, True, False, 17, "none")
    m.graph.node[0].attribute.append(onnx.helper.make_attribute("stash_type", 16))
    result = passes.get(NAME).apply(m)
    assert result.rewritten == 0 and "stash_type 16" in result.findings[0].message
