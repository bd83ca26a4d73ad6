"""pad-to-concat: fixtures, ONNX Pad node cases, version gating, 300+ random Pad configurations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, INT32, INT64, init, inp, model, node, out
from graphfix import passes
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

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "pad_to_concat"}


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "pad-to-concat", seed=6)
    assert "Pad" not in [n.op_type for n in result.model.graph.node]


def test_zero_padding_of_last_two_axes_is_left_alone_unless_forced():
    m = model([node("Pad", ["x", "pads"], ["y"])], [inp("x", FLOAT, [1, 2, 3, 4])], [out("y", FLOAT, [1, 2, 5, 6])],
              [init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], opset=13)
    assert remaining_matches(m, "pad-to-concat") == []
    check_rewrite(m, "pad-to-concat", force=True)


@pytest.mark.parametrize("name,trt,rewritten", [
    ("reflection_pad2d", "7.2", 1), ("reflection_pad2d", "8.2", 0), ("reflection_pad2d", "10.1", 0),
    ("circular_pad", "8.6", 1), ("circular_pad", "10.0", 0),
    ("axes_input", "8.6", 1), ("axes_input", "9.3", 1), ("axes_input", "10.0", 0), ("axes_input", "10.4", 0),
    ("constant_pad_value", "8.0", 1), ("constant_pad_value", "8.2", 0),
])
def test_target_version_decides(name, trt, rewritten):
    assert passes.get("pad-to-concat").apply(FIXTURES[name].build(), trt=trt).rewritten == rewritten


def test_runtime_pads_are_rewritten_with_shape_tensors():
    """pads = [n, n] from Shape(x) of a dynamic x: no constant to fold, rewritten with runtime sizes."""
    m = model([node("Shape", ["x"], ["s"]), node("Concat", ["z", "s", "z", "s"], ["pads"], axis=0), node("Pad", ["x", "pads"], ["y"])],
              [inp("x", FLOAT, ["N"])], [out("y", FLOAT, ["M"])], [init("z", np.zeros(0, np.int64))], opset=13)
    result = check_rewrite(m, "pad-to-concat", {"x": np.arange(5, dtype=np.float32)}, trt="8.0")
    assert "Pad" not in [n.op_type for n in result.model.graph.node]


def test_wrap_by_runtime_pads_is_a_finding():
    m = model([node("Shape", ["x"], ["s"]), node("Concat", ["z", "s", "z", "s"], ["pads"], axis=0),
               node("Pad", ["x", "pads"], ["y"], mode="wrap")],
              [inp("x", FLOAT, ["N"])], [out("y", FLOAT, ["M"])], [init("z", np.zeros(0, np.int64))], opset=19)
    result = passes.get("pad-to-concat").apply(m, trt="8.0")
    assert result.rewritten == 0 and "runtime" in result.findings[0].message


@pytest.mark.parametrize("case", node_cases("Pad"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    for inputs, expected in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        frozen = {k: feeds.pop(k) for k in list(feeds) if k in ("pads", "value", "axes", "constant_value")}
        m = freeze_inputs(runnable(case.model, 11), frozen)
        result = check_rewrite(m, "pad-to-concat", feeds, force=True)
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)


ELEM = {np.float32: FLOAT, np.int32: INT32, np.int64: INT64}


@st.composite
def pad_configs(draw):
    rank = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 5)) for _ in range(rank)]
    mode = draw(st.sampled_from(["constant", "reflect", "edge", "wrap"]))
    use_axes = draw(st.booleans())
    axes = sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1))) if use_axes else list(range(rank))
    begins, ends = [], []
    for a in axes:
        for side in (begins, ends):
            if mode == "constant":
                side.append(draw(st.integers(-(shape[a] - 1) // 2, 3)))
            elif mode == "reflect":
                side.append(draw(st.integers(0, shape[a] - 1)))
            else:
                side.append(draw(st.integers(0, shape[a] if mode == "wrap" else 3)))
    negative_axes = use_axes and draw(st.booleans())
    return shape, mode, [a - rank if negative_axes else a for a in axes] if use_axes else None, begins + ends, draw(st.booleans())


@settings(max_examples=80, deadline=None)
@given(configs=st.lists(pad_configs(), min_size=4, max_size=4), dtype=st.sampled_from(list(ELEM)), value=st.sampled_from([0, 2, -1]))
def test_random_pads_equal_onnxruntime(configs, dtype, value):
    """4 Pads per model: 80 examples = 320 configurations (mode x pads x axes x rank x dtype x static/dynamic)."""
    nodes, ins, outs, inits, feeds = [], [], [], [], {}
    rng = np.random.default_rng(len(configs[0][0]))
    for k, (shape, mode, axes, pads, dynamic) in enumerate(configs):
        names = [f"x{k}", f"p{k}", f"v{k}"] + ([f"a{k}"] if axes is not None else [])
        inits += [init(f"p{k}", np.array(pads, np.int64)), init(f"v{k}", np.array(value, dtype))]
        if axes is not None:
            inits.append(init(f"a{k}", np.array(axes, np.int64)))
        nodes.append(node("Pad", names, [f"y{k}"], mode=mode))
        ins.append(inp(f"x{k}", ELEM[dtype], [f"d{k}_{i}" for i in range(len(shape))] if dynamic else shape))
        outs.append(out(f"y{k}", ELEM[dtype], [f"o{k}_{i}" for i in range(len(shape))]))
        feeds[f"x{k}"] = (rng.standard_normal(shape) * 5).astype(dtype)
    m = model(nodes, ins, outs, inits, opset=19)
    result = check_rewrite(m, "pad-to-concat", feeds, force=True)
    assert "Pad" not in [n.op_type for n in result.model.graph.node]


@given(st.sampled_from(["constant", "edge", "reflect"]), st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data())
def test_pads_computed_at_runtime_equal_onnxruntime(mode, dims, data):
    """Pads fed at runtime (Swin window padding, pad-to-multiple): the releases that want them as
    weights get Slice/Concat/Expand sized by shape tensors, equal for every sign of every pad."""
    rank = len(dims)
    lo = [-(d - 1) if mode != "constant" else -d for d in dims]  # never crop an axis away (edge/reflect need an element)
    begins = [data.draw(st.integers(lo[a], 3 if mode != "reflect" else dims[a] - 1)) for a in range(rank)]
    ends = [data.draw(st.integers(max(lo[a], lo[a] - begins[a]) if mode != "constant" else lo[a],
                                  3 if mode != "reflect" else dims[a] - 1)) for a in range(rank)]
    if mode == "reflect":  # reflect pads at most size-1 of what is left after cropping the other side
        ends = [min(e, dims[a] - 1 - max(0, -begins[a])) for a, e in enumerate(ends)]
        begins = [min(b, dims[a] - 1 - max(0, -ends[a])) for a, b in enumerate(begins)]
    if any(dims[a] + min(begins[a], 0) + min(ends[a], 0) < (1 if mode != "constant" else 0) for a in range(rank)):
        return
    m = model([node("Pad", ["x", "pads"], ["y"], name="/Pad", mode=mode)],
              [inp("x", FLOAT, dims), inp("pads", INT64, [2 * rank])], [out("y", FLOAT, [f"d{a}" for a in range(rank)])], opset=13)
    x = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    pads = np.array(begins + ends, np.int64)
    try:
        ort_run(m, {"x": x, "pads": pads})
    except Exception:  # noqa: BLE001 - a pad onnxruntime itself refuses is outside the op's domain
        return
    check_rewrite(m, "pad-to-concat", {"x": x, "pads": pads}, trt="8.0", atol=0, rtol=0)
