"""graphfix.analysis.aten_reference: the ATen kernels against onnxruntime's native ops and independent numpy."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper

from fixtures.recipes._onnx import FLOAT, inp, out
from fixtures.recipes.aten_fallback import aten, aten_model
from graphfix.analysis import aten_reference as ref
from tests.helpers.support import ort_run


def _native(op: str, inputs: dict[str, np.ndarray], opset: int = 21, **attrs) -> np.ndarray:
    """One onnxruntime node on ``inputs`` (given in the op's input order)."""
    n = helper.make_node(op, list(inputs), ["y"], **attrs)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info(k, FLOAT, None) for k in inputs],
                          [helper.make_tensor_value_info("y", FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return ort_run(m, inputs)[0]


def _torch_bins(in_size: int, out_size: int) -> list[tuple[int, int]]:
    """PyTorch's start_index/end_index (aten/src/ATen/native/AdaptivePooling.h), with floats."""
    return [(math.floor(i * in_size / out_size), math.ceil((i + 1) * in_size / out_size)) for i in range(out_size)]


def _independent_pool(x: np.ndarray, out_hw: tuple[int, int], reduce) -> np.ndarray:
    hb, wb = (_torch_bins(s, o) for s, o in zip(x.shape[-2:], out_hw, strict=True))
    y = np.empty((*x.shape[:-2], *out_hw), np.float64)
    for i, (h0, h1) in enumerate(hb):
        for j, (w0, w1) in enumerate(wb):
            y[..., i, j] = reduce(x[..., h0:h1, w0:w1].astype(np.float64), axis=(-2, -1))
    return y


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("in_size,out_size", [(13, 7), (14, 7), (7, 7), (5, 1), (3, 5), (17, 4), (1, 3)])
def test_pool_bins_are_pytorchs(in_size, out_size):
    assert ref.pool_bins(in_size, out_size) == _torch_bins(in_size, out_size)


@pytest.mark.parametrize("hw,out_hw", [((13, 13), (7, 7)), ((12, 10), (5, 5)), ((4, 6), (6, 4)), ((9, 9), (1, 1))])
def test_adaptive_pool_against_independent_loops(hw, out_hw):
    x = RNG.standard_normal((2, 3, *hw)).astype(np.float32)
    avg, _ = ref.adaptive_pool(x, out_hw, "avg")
    mx, idx = ref.adaptive_pool(x, out_hw, "max")
    np.testing.assert_allclose(avg, _independent_pool(x, out_hw, np.mean), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(mx, _independent_pool(x, out_hw, np.max).astype(np.float32))
    flat = x.reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, idx.reshape(2, 3, -1), -1).reshape(mx.shape), mx)


@pytest.mark.parametrize("mode,onnx_op", [("avg", "AveragePool"), ("max", "MaxPool")])
def test_adaptive_pool_dividing_equals_onnxruntime_pool(mode, onnx_op):
    x = RNG.standard_normal((1, 4, 12, 8)).astype(np.float32)
    got, _ = ref.adaptive_pool(x, (4, 2), mode)
    np.testing.assert_allclose(got, _native(onnx_op, {"x": x}, kernel_shape=[3, 4], strides=[3, 4]), rtol=1e-5, atol=1e-6)


def test_adaptive_max_indices_first_maximum():
    x = np.zeros((1, 1, 4, 4), np.float32)
    _, idx = ref.adaptive_pool(x, (2, 2), "max")
    np.testing.assert_array_equal(idx[0, 0], [[0, 2], [8, 10]])


def test_layer_norm_equals_onnxruntime():
    x, w, b = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32), RNG.standard_normal((4, 5)).astype(np.float32), RNG.standard_normal((4, 5)).astype(np.float32)
    got = ref.layer_norm(x, [4, 5], w, b, 1e-5)
    np.testing.assert_allclose(got, _native("LayerNormalization", {"x": x, "w": w, "b": b}, 17, axis=-2, epsilon=1e-5), rtol=1e-5, atol=1e-5)


def test_group_norm_equals_onnxruntime():
    x = RNG.standard_normal((2, 6, 3, 4)).astype(np.float32)
    w, b = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
    got = ref.group_norm(x, 3, w, b, 1e-5)
    np.testing.assert_allclose(got, _native("GroupNormalization", {"x": x, "w": w, "b": b}, 21, num_groups=3, epsilon=1e-5), rtol=1e-5, atol=1e-5)


def test_instance_norm_equals_onnxruntime():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w, b = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    mean, var = RNG.standard_normal(3).astype(np.float32), (RNG.random(3) + 0.5).astype(np.float32)
    got = ref.instance_norm(x, w, b, None, None, True, 1e-5)
    np.testing.assert_allclose(got, _native("InstanceNormalization", {"x": x, "w": w, "b": b}, epsilon=1e-5), rtol=1e-5, atol=1e-5)
    got = ref.instance_norm(x, w, b, mean, var, False, 1e-5)
    want = _native("BatchNormalization", {"x": x, "w": w, "b": b, "m": mean, "v": var}, 15, epsilon=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_clamp_equals_onnxruntime_clip():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(ref.clamp(x, -0.5, 0.25), _native("Clip", {"x": x, "lo": np.float32(-0.5), "hi": np.float32(0.25)}))
    np.testing.assert_array_equal(ref.clamp(x, 1.0, -1.0), np.full_like(x, -1.0))  # lo > hi: all hi, like PyTorch
    np.testing.assert_array_equal(ref.clamp(x, None, 0.0), np.minimum(x, 0))


def test_pixel_shuffle_equals_depth_to_space_crd():
    x = RNG.standard_normal((2, 12, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(ref.pixel_shuffle(x, 2), _native("DepthToSpace", {"x": x}, 13, blocksize=2, mode="CRD"))
    np.testing.assert_array_equal(ref.pixel_unshuffle(ref.pixel_shuffle(x, 2), 2), x)


def test_bind_arguments_both_forms_and_empty_inputs():
    inputs = ["x", "shape", None, "b", "eps", "cudnn"]
    assert ref.bind_arguments("layer_norm", inputs, {}) == dict(zip(["input", "normalized_shape", "weight", "bias", "eps", "cudnn_enable"], inputs, strict=True))
    bound = ref.bind_arguments("layer_norm", ["x", "w", "b"], {"normalized_shape": [4], "eps": 1e-3, "cudnn_enable": 1})
    assert bound == {"input": "x", "normalized_shape": [4], "weight": "w", "bias": "b", "eps": 1e-3, "cudnn_enable": 1}
    assert ref.bind_arguments("clamp", ["x"], {}) == {"self": "x", "min": None, "max": None}


def test_run_reference_runs_mixed_models_by_output_name():
    m = aten_model(
        [helper.make_node("Constant", [], ["os"], value=onnx.numpy_helper.from_array(np.array([2, 2], np.int64))),
         aten("adaptive_max_pool2d", ["x", "os"], ["p", "i"]), helper.make_node("Relu", ["p"], ["y"]),
         aten("layer_norm", ["x"], ["z"], normalized_shape=[4], eps=1e-5)],
        [inp("x", FLOAT, [1, 2, 4, 4])], [out("y", FLOAT, [1, 2, 2, 2]), out("z", FLOAT, [1, 2, 4, 4])],
    )
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    got = ref.run_reference(m, {"x": x})
    assert list(got) == ["y", "z"]
    np.testing.assert_array_equal(got["y"], np.maximum(ref.adaptive_pool(x, (2, 2), "max")[0], 0))
    np.testing.assert_allclose(got["z"], ref.layer_norm(x, [4], None, None, 1e-5))


def test_unknown_operator_is_named():
    m = aten_model([aten("linalg_qr", ["x"], ["y"])], [inp("x", FLOAT, [3, 3])], [out("y", FLOAT, [3, 3])])
    with pytest.raises(Exception, match="aten::linalg_qr"):
        ref.run_reference(m, {"x": np.eye(3, dtype=np.float32)})
