"""Per-node inference of what rewrites build or retype: axes given by Constant nodes, and types
carried downstream once a rewrite typed a tensor (an If inlined)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphfix.graph import to_graph
from graphfix.graph.infer import infer_nodes, propagate


def _model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    return helper.make_model(
        helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)])


def _axes(name: str) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array([0], np.int64)))


def _by_name(graph, name):
    return next(o for n in graph.nodes for o in n.outputs if o.name == name)


def test_unsqueeze_axes_from_a_constant_node_give_the_shape():
    """The TorchScript exporter's Unsqueeze reads its axes from a Constant node. Before: no shape."""
    graph = to_graph(_model([_axes("ax"), helper.make_node("Unsqueeze", ["x", "ax"], ["y"])]))
    y = _by_name(graph, "y")
    y.shape = None
    infer_nodes([y.inputs[0]], 17)
    assert y.shape == [1, "batch", 4]


def test_types_are_carried_to_what_reads_a_newly_typed_tensor():
    """t (an If's output, say) is typed by a rewrite: its readers, and theirs, gain shapes; the
    Shape node's output its length."""
    graph = to_graph(_model([helper.make_node("Identity", ["x"], ["t"]), _axes("ax"),
                             helper.make_node("Unsqueeze", ["t", "ax"], ["u"]), helper.make_node("Shape", ["u"], ["s"]),
                             helper.make_node("Relu", ["u"], ["y"])]))
    t, u, s, y = (_by_name(graph, n) for n in ("t", "u", "s", "y"))
    for v in (t, u, s, y):
        v.shape = None
    t.shape = ["batch", 4]
    gained = propagate([t], 17)
    assert (u.shape, s.shape, y.shape) == ([1, "batch", 4], [3], [1, "batch", 4])
    assert {n.op for n in gained} == {"Unsqueeze", "Shape", "Relu"}
    assert propagate([t], 17) == []  # nothing left to gain
