"""Body initializers that shadow an enclosing name are renamed apart, the model's meaning kept."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from fixtures.recipes._onnx import BOOL, FLOAT, inp, model, node, out
from graphfix.graph import to_graph, to_model
from graphfix.onnxio.shadow import unshadowed
from tests.helpers.support import ort_run


def _shadowing_if(nested: bool) -> onnx.ModelProto:
    """then: returns (initializer y) + (initializer y read by a nested If's branch); else: Relu(x)."""
    y = numpy_helper.from_array(np.full((1, 2), 5.0, np.float32), "y")
    reads = [node("Add", ["y", "y"], ["twice"])]
    outputs = [helper.make_tensor_value_info("y", FLOAT, [1, 2])]
    if nested:  # a nested branch reads the renamed y from its parent branch
        inner = helper.make_graph([node("Neg", ["y"], ["ny"])], "inner", [], [helper.make_tensor_value_info("ny", FLOAT, [1, 2])])
        reads.append(node("If", ["c"], ["inner_out"], then_branch=inner, else_branch=inner))
        reads.append(node("Add", ["twice", "inner_out"], ["sum"]))
        outputs = [helper.make_tensor_value_info("sum", FLOAT, [1, 2])]
    else:
        reads = []
    then = helper.make_graph(reads, "then", [], outputs, [y])
    other = helper.make_graph([node("Relu", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", FLOAT, [1, 2])])
    return model([node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                 [inp("x", FLOAT, [1, 2]), inp("c", BOOL, [])], [out("y", FLOAT, [1, 2])], opset=13)


def test_a_model_without_shadowing_is_returned_as_is():
    m = _shadowing_if(False)
    then = next(a.g for a in m.graph.node[0].attribute if a.name == "then_branch")
    then.initializer[0].name = "local"
    then.output[0].name = "local"
    assert unshadowed(m) is m


def test_renamed_initializers_keep_what_the_model_computes_through_a_graphsurgeon_round_trip():
    """Before, onnx-graphsurgeon's import bound the branch's 'y' to the If's output 'y' (value lost)."""
    for nested in (False, True):
        m = _shadowing_if(nested)
        feeds = {"x": np.array([[-1.0, 2.0]], np.float32), "c": np.array(True)}
        want = ort_run(m, feeds)[0]
        fixed = unshadowed(m)
        assert fixed is not m and [t.name for a in fixed.graph.node[0].attribute for t in a.g.initializer] == ["y__local"]
        np.testing.assert_array_equal(ort_run(fixed, feeds)[0], want)
        back = to_model(to_graph(m), m)
        onnx.checker.check_model(back, full_check=True)
        np.testing.assert_array_equal(ort_run(back, feeds)[0], want)
