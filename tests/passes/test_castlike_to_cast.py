"""castlike-to-cast: fixtures, ONNX CastLike node cases, version boundaries, random type pairs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.support import case_feeds, check_fixture, check_rewrite, node_cases, ort_run, runnable

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "castlike_to_cast"}
INSIDE, OUTSIDE = ["7.0", "8.0", "8.6", "9.0"], ["9.1", "10.1", "11.1"]
TYPES = [np.float32, np.float16, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_]


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_and_equal(fx):
    result = check_fixture(fx, "castlike-to-cast")
    assert "CastLike" not in _ops(result.model)
    for version in INSIDE:
        assert not [f for f in check_model(result.model, version).findings if f.rule == "no-importer"], version


@pytest.mark.parametrize("version,rewrites", [(v, True) for v in INSIDE] + [(v, False) for v in OUTSIDE])
def test_version_boundaries(version, rewrites):
    result = passes.get("castlike-to-cast").apply(FIXTURES["dynamo_index_arith"].build(), trt=version)
    assert (result.rewritten > 0) == rewrites


def _array(x: object) -> np.ndarray:
    """The CastLike cases store their data as TensorProtos (exotic types numpy cannot name)."""
    return onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)


@pytest.mark.parametrize("case", node_cases("CastLike"), ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 19)
    rewritten = passes.get("castlike-to-cast").apply(m).model
    (cast,) = rewritten.graph.node
    like = case.model.graph.input[1].type.tensor_type.elem_type
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in cast.attribute}
    original = {a.name: onnx.helper.get_attribute_value(a) for a in case.model.graph.node[0].attribute}
    assert cast.op_type == "Cast" and attrs == {**original, "to": like}
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, [_array(x) for x in inputs])
        try:
            ort_run(m, feeds)
        except Exception as exc:  # noqa: BLE001 - float8/float4/int4/int2 data the onnxruntime binding cannot feed
            pytest.skip(f"rewritten Cast checked structurally; onnxruntime cannot run {case.name}: {str(exc)[:100]}")
        result = check_rewrite(m, "castlike-to-cast", feeds)
        assert _ops(result.model) == ["Cast"]
        got, want = ort_run(result.model, feeds)[0], _array(expected[0])
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@st.composite
def castlike_cases(draw):
    return (draw(st.lists(st.integers(0, 4), max_size=3)), draw(st.sampled_from(TYPES)), draw(st.sampled_from(TYPES)),
            draw(st.integers(0, 2**31)))


def _check_random(shape, src, dst, seed):
    elem = {t: onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t)) for t in TYPES}
    x = (np.random.default_rng(seed).standard_normal(shape) * 50).astype(src)
    m = model([node("CastLike", ["x", "like"], ["y"])], [inp("x", elem[src], shape), inp("like", elem[dst], [1])],
              [out("y", elem[dst], shape)], opset=15)
    result = check_rewrite(m, "castlike-to-cast", {"x": x, "like": np.zeros(1, dst)})
    assert _ops(result.model) == ["Cast"]


@settings(max_examples=40, deadline=None)
@given(castlike_cases())
def test_random_castlike_equals_onnxruntime(case):
    _check_random(*case)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(castlike_cases())
def test_random_castlike_equals_onnxruntime_slow(case):
    _check_random(*case)
