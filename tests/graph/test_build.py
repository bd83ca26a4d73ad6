"""Builder's constants are the objects onnx-graphsurgeon's constructor makes (they are built
without it, for speed), and behave as such in a graph."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
import pytest
from onnx_graphsurgeon.util.misc import SynchronizedList

from graphfix.graph.build import Builder, Skip


def _attrs(t: gs.Tensor) -> list[tuple[str, object]]:
    out = []
    for k, v in t.__dict__.items():
        if isinstance(v, SynchronizedList):
            v = (type(v), list(v), v.parent_obj is t, v.field_name)
        out.append((k, v if not isinstance(v, np.ndarray) else (v.dtype, v.shape, v.tobytes())))
    return out


def test_builder_constant_has_the_constructors_attributes():
    graph = gs.Graph(opset=17)
    for value in (np.float32(-1.5), np.arange(6, dtype=np.int64).reshape(2, 3), 2.0, [1, 2]):
        made = Builder(graph, "/n").const(value, hint="min")
        constructed = gs.Constant(made.name, np.asarray(made.values))
        assert type(made) is gs.Constant
        assert _attrs(made) == _attrs(constructed)


def test_builder_constant_links_to_the_node_reading_it():
    graph = gs.Graph(opset=17)
    b = Builder(graph, "/n")
    x = gs.Variable("x", dtype=np.float32, shape=[2])
    lo = b.const(np.float32(0), hint="min")
    y = b.op("Max", [x, lo], dtype=np.float32, shape=[2])
    node = y.inputs[0]
    assert list(lo.outputs) == [node] and list(lo.inputs) == []
    node.inputs.clear()
    assert list(lo.outputs) == []


def test_a_node_whose_attribute_has_another_type_than_its_op_declares_is_a_skip():
    """contrib-matmul-lower copied FusedConv's ``pads`` -1.0 (a float, fuzzed) onto a Conv: the
    written model failed onnx's checker; now the rewrite is left with the reason as a finding."""
    b = Builder(gs.Graph(opset=17), "/n")
    x = gs.Variable("x", dtype=np.float32, shape=[1, 1, 3, 3])
    with pytest.raises(Skip, match=r"Conv attribute pads would be FLOAT -1.0 \(the op takes INTS\)"):
        b.op("Conv", [x, np.ones((1, 1, 1, 1), np.float32)], {"pads": -1.0})
    assert b.op("Conv", [x, np.ones((1, 1, 1, 1), np.float32)], {"pads": [0, 0, 0, 0], "group": np.int64(1)}) is not None
    assert b.op("Custom", [x], {"pads": -1.0}, domain="com.example") is not None  # no schema: not judged
