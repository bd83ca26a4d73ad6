"""Nodes with an empty list attribute are exported (graphfix.graph.node_export): onnx-graphsurgeon
imports ``axis=[]`` as ``[]`` and its exporter cannot type it ("Could not infer attribute type from
empty iterator", exit 3 when such a node was rewritten or probed; found by the fuzz)."""

from __future__ import annotations

import onnx
from onnx import helper

import graphfix
from tests.helpers.cli_runs import ROOT

SEED = ROOT / "fixtures" / "qdq_uint8_to_int8" / "uint8_zero_point_128_conv.onnx"


def test_a_rewritten_node_with_an_empty_list_attribute_keeps_it_empty():
    m = onnx.load(str(SEED))
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear")
    dq.attribute.append(helper.make_attribute("axis", [], attr_type=onnx.AttributeProto.FLOATS))
    # an output typed without a shape, as the fuzz added: onnx's checker stops at that (which graphfix
    # tolerates, onnxruntime runs it) before it reads the attribute
    m.graph.output.append(helper.make_tensor_value_info(dq.output[0], onnx.TensorProto.FLOAT, None))
    result = graphfix.fix(m, passes="qdq-uint8-to-int8", verify=False)
    assert any(r.verdict.startswith("kept") for r in result.report.passes)
    written = [a for n in result.model.graph.node for a in n.attribute if a.name == "axis"]
    assert written and [a.type for a in written] == [onnx.AttributeProto.FLOATS] * len(written) and not written[0].floats
