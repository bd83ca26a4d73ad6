"""Nodes with an empty list attribute are exported (graphfix.graph.node_export): onnx-graphsurgeon
imports ``axis=[]`` as ``[]`` and its exporter cannot type it ("Could not infer attribute type from
empty iterator", exit 3 when such a node was rewritten or probed; found by the fuzz)."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import helper

import graphfix
from graphfix.errors import GraphfixError
from graphfix.graph.node_export import TypedEmpty, export_node
from tests.helpers.cli_runs import ROOT

SEED = ROOT / "fixtures" / "qdq_uint8_to_int8" / "uint8_zero_point_128_conv.onnx"


def test_an_empty_list_attribute_is_written_empty_of_its_imported_type():
    node = gs.Node("Squeeze", name="s", inputs=[gs.Variable("x")], outputs=[gs.Variable("y")],
                   attrs={"axes": TypedEmpty(onnx.AttributeProto.FLOATS)})
    written = export_node(node).attribute
    assert [(a.name, a.type, list(a.floats)) for a in written] == [("axes", onnx.AttributeProto.FLOATS, [])]


def test_an_empty_list_a_pass_leaves_gets_the_schemas_list_type():
    node = gs.Node("Squeeze", name="s", inputs=[gs.Variable("x")], outputs=[gs.Variable("y")], attrs={"axes": []})
    assert [(a.name, a.type) for a in export_node(node).attribute] == [("axes", onnx.AttributeProto.INTS)]


def test_an_empty_list_where_the_op_takes_one_value_is_refused_at_load():
    """The fuzz's case (DequantizeLinear ``axis=[]`` beside an output typed without a shape) was
    exported empty; since the load compares attribute types with the schema it is refused, one line."""
    m = onnx.load(str(SEED))
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear")
    dq.attribute.append(helper.make_attribute("axis", [], attr_type=onnx.AttributeProto.FLOATS))
    m.graph.output.append(helper.make_tensor_value_info(dq.output[0], onnx.TensorProto.FLOAT, None))
    with pytest.raises(GraphfixError, match="attribute 'axis' of DequantizeLinear node .* is FLOATS, the op takes INT"):
        graphfix.fix(m, passes="qdq-uint8-to-int8", verify=False)
