"""aten-fallback: fixtures verified against graphfix.analysis.aten_reference, random adaptive pooling, findings."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, INT64, const, inp, out
from fixtures.recipes.aten_fallback import aten, aten_model
from graphfix import passes
from graphfix.analysis.aten_reference import run_reference
from graphfix.check.findings import check_model
from graphfix.onnxio.ir import runtime_compatible
from graphfix.verify.inputs import make_inputs
from tests.helpers.support import assert_outputs_match, ort_run, remaining_matches

PASS = "aten-fallback"
FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "aten_fallback"}
VERSIONS = ("5.1", "7.0", "8.0", "8.6", "10.1", "11.1")


def check_aten(m: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None, atol: float = 1e-5, rtol: float = 1e-5, **kw):
    """Rewrite; no ATen left; a valid model whose onnxruntime outputs equal the reference's on the original."""
    feeds = feeds if feeds is not None else make_inputs(m, seed=4)[0]
    before = run_reference(m, feeds)
    result = passes.get(PASS).apply(m, **kw)
    assert result.rewritten > 0, result.findings
    assert remaining_matches(result.model, PASS) == []
    assert all(n.op_type != "ATen" for n in result.model.graph.node)
    onnx.checker.check_model(runtime_compatible(result.model), full_check=True)
    assert_outputs_match(list(before.values()), ort_run(result.model, feeds), atol, rtol)
    assert [o.name for o in result.model.graph.output] == [o.name for o in m.graph.output]
    return result


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal_to_reference(fx):
    m = fx.build()
    assert remaining_matches(m, PASS)
    result = check_aten(m, make_inputs(m, fx.input_shapes, fx.val_range, seed=5)[0])
    for version in VERSIONS:
        assert not [f for f in check_model(result.model, version).findings if f.rule == "no-importer" or f.fix_pass == PASS]


@pytest.mark.parametrize("name,ops", [
    ("adaptive_avg_pool_14_to_7", ["AveragePool"]),
    ("adaptive_avg_pool_13_to_7", ["MatMul", "MatMul"]),
])
def test_pool_strategy(name, ops):
    result = passes.get(PASS).apply(FIXTURES[name].build())
    assert sorted(n.op_type for n in result.model.graph.node if n.op_type != "Constant") == sorted(ops)


def test_dividing_axis_is_pooled_and_the_other_binned():
    result = passes.get(PASS).apply(FIXTURES["adaptive_max_pool_12x10_to_5x5"].build())
    pool = next(n for n in result.model.graph.node if n.op_type == "MaxPool")
    assert [list(a.ints) for a in pool.attribute if a.name == "kernel_shape"] == [[1, 2]]


def test_every_release_needs_it():
    m = FIXTURES["layer_norm"].build()
    for version in VERSIONS:
        assert passes.get(PASS).apply(m, trt=version).rewritten == 1


# ------------------------------------------------------------------ findings
def _findings(m: onnx.ModelProto) -> list[str]:
    result = passes.get(PASS).apply(m)
    assert result.rewritten == 0
    return [f.message for f in result.findings]


def test_op_without_equivalent_is_a_finding():
    m = aten_model([aten("linalg_qr", ["x"], ["y"])], [inp("x", FLOAT, [3, 3])], [out("y", FLOAT, [3, 3])])
    assert "aten::linalg_qr has no ONNX equivalent" in _findings(m)[0]


def test_runtime_output_size_is_a_finding_with_its_path():
    m = aten_model(
        [onnx.helper.make_node("Shape", ["ref"], ["s"], name="/Shape"), const("hw", [2, 3], np.int64),
         onnx.helper.make_node("Gather", ["s", "hw"], ["size"], name="/Gather", axis=0),
         aten("adaptive_avg_pool2d", ["x", "size"], ["y"])],
        [inp("x", FLOAT, [1, 2, 9, 9]), inp("ref", FLOAT, [1, 2, "h", "w"])], [out("y", FLOAT, [1, 2, "h", "w"])],
    )
    assert "output_size of aten::adaptive_avg_pool2d is not constant: the dynamic dims of 'ref' -> Shape '/Shape' -> Gather '/Gather'" in _findings(m)[0]


def test_dynamic_spatial_dims_are_a_finding():
    m = aten_model([const("os", [3, 3], np.int64), aten("adaptive_avg_pool2d", ["x", "os"], ["y"])],
                   [inp("x", FLOAT, [1, 2, "h", "w"])], [out("y", FLOAT, [1, 2, 3, 3])])
    assert "static spatial dims" in _findings(m)[0]


def test_used_max_indices_are_a_finding():
    m = aten_model([const("os", [3, 3], np.int64), aten("adaptive_max_pool2d", ["x", "os"], ["y", "i"])],
                   [inp("x", FLOAT, [1, 2, 7, 7])], [out("y", FLOAT, [1, 2, 3, 3]), out("i", INT64, [1, 2, 3, 3])])
    assert "indices output" in _findings(m)[0]


# ------------------------------------------------------------ random pooling
def _torch_adaptive(x: np.ndarray, out_size: list[int], mode: str) -> np.ndarray:
    """PyTorch's adaptive pooling, written out per output element (start/end as in AdaptivePooling.h)."""
    n = len(out_size)
    spatial = x.shape[-n:]
    y = np.empty((*x.shape[:-n], *out_size), np.float64)
    for pos in np.ndindex(*out_size):
        window = tuple(slice(math.floor(p * s / o), math.ceil((p + 1) * s / o)) for p, s, o in zip(pos, spatial, out_size, strict=True))
        block = x[(..., *window)].astype(np.float64)
        axes = tuple(range(-n, 0))
        y[(..., *pos)] = block.mean(axis=axes) if mode == "avg" else block.max(axis=axes)
    return y.astype(x.dtype)


def _random_pool(sizes, mode, half, batched, opset=11, trt=None):
    n = len(sizes)
    spatial = [s for s, _ in sizes]
    out_size = [o for _, o in sizes]
    dtype, elem = (np.float16, FLOAT16) if half else (np.float32, FLOAT)
    lead = [2, 3] if batched else [3]
    m = aten_model(
        [const("os", out_size, np.int64), aten(f"adaptive_{mode}_pool{n}d", ["x", "os"], ["y"])],
        [inp("x", elem, [*lead, *spatial])], [out("y", elem, [*lead, *out_size])], opset=opset,
    )
    x = np.random.default_rng(sum(spatial) * 31 + sum(out_size)).standard_normal([*lead, *spatial]).astype(dtype)
    tol = 2e-3 if half else 1e-5
    result = check_aten(m, {"x": x}, atol=tol, rtol=tol, trt=trt)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], _torch_adaptive(x, out_size, mode), atol=tol, rtol=tol)


_SIZES = st.lists(st.integers(1, 16).flatmap(lambda i: st.tuples(st.just(i), st.integers(1, i + 3))), min_size=1, max_size=3)


_POOLING = dict(sizes=_SIZES, mode=st.sampled_from(["avg", "max"]), half=st.booleans(), batched=st.booleans(),
                opset=st.sampled_from([11, 18]), trt=st.sampled_from([None, "10.1"]))


@settings(max_examples=40, deadline=None)
@given(**_POOLING)
def test_random_adaptive_pooling(sizes, mode, half, batched, opset, trt):
    _random_pool(sizes, mode, half, batched, opset, trt)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(**_POOLING)
def test_random_adaptive_pooling_slow(sizes, mode, half, batched, opset, trt):
    _random_pool(sizes, mode, half, batched, opset, trt)


@pytest.mark.parametrize("operator,shape,size", [("adaptive_max_pool2d", [1, 2, 7, 5], [3, 2]),
                                                  ("adaptive_avg_pool3d", [1, 2, 7, 4, 4], [3, 2, 2])])
@pytest.mark.parametrize("trt,reduces", [(None, False), ("9.3", False), ("10.0", True)])
def test_opset18_reduce_axes_input_only_for_10_0(operator, shape, size, trt, reduces):
    """Parsers before 10.0 ignore an opset-18 ReduceMean/ReduceMax axes input: no such node for them."""
    m = aten_model([const("os", size, np.int64), aten(operator, ["x", "os"], ["y"])],
                   [inp("x", FLOAT, shape)], [out("y", FLOAT, [*shape[:2], *size])], opset=18)
    ops = {n.op_type for n in check_aten(m, trt=trt).model.graph.node}
    if reduces:  # 10.0 reads the axes input (the builder writes opset-18 max as TopK for every release)
        assert ops & {"ReduceMean", "ReduceMax", "TopK"}
    else:
        assert not ops & {"ReduceMean", "ReduceMax"}


def test_opset18_norms_avoid_reducemean():
    m = aten_model([const("ns", [6], np.int64), const("eps", 1e-5, np.float64), const("c", True, np.bool_),
                    aten("layer_norm", ["x", "ns", "", "", "eps", "c"], ["y"])],
                   [inp("x", FLOAT, [2, 3, 6])], [out("y", FLOAT, [2, 3, 6])], opset=18)
    assert "ReduceMean" not in {n.op_type for n in check_aten(m).model.graph.node}
