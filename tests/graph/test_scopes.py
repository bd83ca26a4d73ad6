"""Bodies through import and export: each branch typed from its own value_infos, each initializer
written in the scope that declared it, no types re-declared for names a body only reads.

The model is an optimum merged decoder in miniature: an If on ``use_cache`` whose two branches
(the decoder without and with past) reuse auto-numbered names (``/Cast_output_0``) for tensors
of other types, compute position ids with Shape/Gather/Range, and normalise with a
LayerNormalization reading the main graph's weights.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from fixtures.recipes._onnx import inp, model, node, out
from graphfix import passes
from graphfix.graph import to_graph, to_model
from tests.helpers.control_flow import merged_decoder, strictly_inferred
from tests.helpers.support import ort_run

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def _feeds(use_cache: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": rng.standard_normal((2, 3, 8)).astype(np.float32), "past": rng.standard_normal((2, 2, 5, 8)).astype(np.float32),
            "use_cache": np.array(use_cache)}


def test_layernorm_in_branches_that_reuse_names_passes_strict_inference():
    """Before: the with-past branch's ``/Cast_output_0`` was typed float from the other branch,
    and strict inference refused the written model ("Inferred elem type differs")."""
    m = merged_decoder()
    strictly_inferred(m)
    result = passes.get("layernorm-decompose").apply(m, trt="8.5")
    assert result.rewritten == 2
    strictly_inferred(result.model)
    for use_cache in (True, False):
        np.testing.assert_allclose(ort_run(result.model, _feeds(use_cache))[0], ort_run(m, _feeds(use_cache))[0], rtol=1e-5, atol=1e-5)


def test_each_initializer_is_written_in_the_scope_that_declared_it():
    """The weights both branches read stay in the main graph, once (before: onnx-graphsurgeon
    wrote pos_table/scale/bias into each branch, twice the weights); a Loop body's own weights
    and the constants a rewrite adds in it stay in the body."""
    result = passes.get("layernorm-decompose").apply(merged_decoder(), trt="8.5")
    assert sorted(t.name for t in result.model.graph.initializer) == ["bias", "pos_table", "scale"]
    for branch in result.model.graph.node[0].attribute:
        assert not {t.name for t in branch.g.initializer} & {"bias", "pos_table", "scale"}

    body = helper.make_graph(
        [node("LayerNormalization", ["x", "w", "b"], ["ln"], axis=-1), node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("ln", FLOAT, None)],
        [numpy_helper.from_array(np.ones(4, np.float32), "w"), numpy_helper.from_array(np.zeros(4, np.float32), "b")])
    m = model([node("Loop", ["trips", ""], ["y"], body=body)], [inp("x", FLOAT, [2, 4])], [out("y", FLOAT, [1, 2, 4])],
              [numpy_helper.from_array(np.array(1, np.int64), "trips")], opset=17)
    result = passes.get("layernorm-decompose").apply(m, trt="8.5")
    body_out = result.model.graph.node[0].attribute[0].g
    assert [t.name for t in result.model.graph.initializer] == ["trips"]
    assert {"w", "b"} <= {t.name for t in body_out.initializer}
    strictly_inferred(result.model)


def test_a_body_declares_no_type_for_what_it_only_reads():
    result = passes.get("layernorm-decompose").apply(merged_decoder(), trt="8.5")
    for branch in result.model.graph.node[0].attribute:
        assert not {vi.name for vi in branch.g.value_info} & {"x", "past", "use_cache"}


def test_export_without_passes_keeps_bodies_equal():
    m = merged_decoder()
    again = to_model(to_graph(m), m)
    strictly_inferred(again)
    assert sorted(t.name for t in again.graph.initializer) == ["bias", "pos_table", "scale"]
    np.testing.assert_array_equal(ort_run(again, _feeds(True))[0], ort_run(m, _feeds(True))[0])


def test_a_branch_returning_its_own_initializer_keeps_it():
    """No node reads it, so the body export did not write it: "Graph output 'local' is not an
    output of any node" (a placeholder branch, as optimum's with-past branch returns)."""
    local = numpy_helper.from_array(np.full((1, 2), 5.0, np.float32), "local")
    then = helper.make_graph([], "then", [], [helper.make_tensor_value_info("local", FLOAT, [1, 2])], [local])
    other = helper.make_graph([node("Relu", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", FLOAT, [1, 2])])
    m = model([node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [inp("x", FLOAT, [1, 2]), inp("c", TensorProto.BOOL, [])], [out("y", FLOAT, [1, 2])], opset=13)
    again = to_model(to_graph(m), m)
    strictly_inferred(again)
    feeds = {"x": np.array([[-1.0, 2.0]], np.float32), "c": np.array(True)}
    np.testing.assert_array_equal(ort_run(again, feeds)[0], np.full((1, 2), 5.0, np.float32))
