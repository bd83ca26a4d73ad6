"""--set-input / set_inputs: an input frozen to a value, what follows folded, the Ifs it decides
inlined, verified against the original fed that value, and said in the report and the metadata."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import graphfix
from fixtures.recipes._onnx import inp, model, node, out
from graphfix.onnxio.proto import all_nodes
from graphfix.pipeline import set_inputs
from graphfix.pipeline.set_inputs import METADATA_KEY
from tests.helpers.control_flow import merged_decoder, voice_activity_detector
from tests.helpers.support import ort_run

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in all_nodes(m.graph)]


@pytest.mark.parametrize("version", ["8.5", "10.1"])
def test_a_sample_rate_frozen_leaves_no_runtime_if(version):
    m = voice_activity_detector()
    result = graphfix.fix(m, passes="auto", trt=version, set_inputs={"sr": 16000})
    assert result.report.status == "ok"
    assert "If" not in _ops(result.model)
    assert [i.name for i in result.model.graph.input] == ["x"]
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], ort_run(m, {"x": x, "sr": np.array(16000)})[0], rtol=1e-6)


def test_the_specialisation_is_verified_and_said_in_the_report_and_the_metadata():
    result = graphfix.fix(voice_activity_detector(), passes="all", set_inputs={"sr": 8000})
    record = next(p for p in result.report.passes if p.name == "set-input")
    assert record.verdict == "kept" and record.outputs and all(d["passed"] for d in record.outputs.values())
    assert result.report.settings["set_inputs"] == {"sr": 8000}
    assert any("sr=8000" in note for note in result.report.notes)
    assert json.loads({p.key: p.value for p in result.model.metadata_props}[METADATA_KEY]) == {"sr": 8000}
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(ort_run(result.model, {"x": x})[0], np.tanh(2 * x), rtol=1e-6)


@pytest.mark.parametrize("use_cache", [False, True])
def test_a_merged_decoder_flag_picks_one_decoder(use_cache):
    m = merged_decoder()
    result = graphfix.fix(m, passes="auto", trt="8.5", set_inputs={"use_cache": use_cache},
                          input_shapes={"x": (2, 3, 8), "past": (2, 2, 5, 8)})
    assert result.report.status == "ok"
    assert "If" not in _ops(result.model) and "LayerNormalization" not in _ops(result.model)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((2, 3, 8)).astype(np.float32), "past": rng.standard_normal((2, 2, 5, 8)).astype(np.float32)}
    want = ort_run(m, {**feeds, "use_cache": np.array(use_cache)})[0]
    np.testing.assert_allclose(ort_run(result.model, feeds)[0], want, rtol=1e-5, atol=1e-5)


def test_a_small_tensor_and_text_values_are_typed_from_the_input():
    m = model([node("Mul", ["x", "gain"], ["y"])], [inp("x", FLOAT, [2, 3]), inp("gain", FLOAT, [3])], [out("y", FLOAT, [2, 3])])
    result = graphfix.fix(m, passes="all", set_inputs={"gain": "[1, 2.5, -1]"})
    assert [i.name for i in result.model.graph.input] == ["x"]
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(ort_run(result.model, {"x": x})[0], x * np.array([1, 2.5, -1], np.float32))


def test_no_value_given_reads_no_node(monkeypatch):
    """Every run asks for the values to freeze; without one the model's nodes are not listed
    (listing every node's inputs was 0.15 s of each 100k-node run: bench/scale.py)."""
    def listed(graph):
        raise AssertionError("the nodes were listed")

    monkeypatch.setattr(set_inputs, "all_nodes", listed)
    assert set_inputs.values(voice_activity_detector(), {}) == {}
