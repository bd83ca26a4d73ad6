"""A model's graph moved into control flow, as exporters do: both branches of an If on a graph
input (an optimum merged decoder, its weights shared by the main graph), or the body of a
one-iteration Loop (a TF while_loop, its weights inside the body)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphfix import passes
from graphfix.analysis.fold import Folder
from graphfix.graph import Builder, to_graph
from graphfix.graph.importer import all_graphs
from graphfix.passes.base import Context
from graphfix.trt.versions import TrtVersion

#: The If's condition, a graph input of the wrapped model.
CONDITION = "gf_test_branch"


def _body(graph: onnx.GraphProto, name: str, inputs: list[onnx.ValueInfoProto], extra: list[onnx.NodeProto],
          outputs: list[onnx.ValueInfoProto], initializers: list[onnx.TensorProto]) -> onnx.GraphProto:
    return helper.make_graph([*graph.node, *extra], name, inputs, outputs, initializers)


def _model(template: onnx.ModelProto, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], initializers: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, f"{template.graph.name}_wrapped", inputs, outputs, initializers)
    m = helper.make_model(graph, opset_imports=list(template.opset_import), ir_version=max(template.ir_version, 4))
    m.functions.extend(template.functions)
    # The checker wants the main graph's outputs shaped: what inference finds for them, nothing else.
    typed = onnx.shape_inference.infer_shapes(m)
    del m.graph.output[:]
    m.graph.output.extend(typed.graph.output)
    return m


def _weights_free_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    weights = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in weights]


def wrapped_in_if(model: onnx.ModelProto) -> onnx.ModelProto:
    """Both branches the model's graph (the same names in each), the weights in the main graph,
    the If's outputs the model's outputs renamed ``<name>.out``."""
    outs = list(model.graph.output)
    then = _body(model.graph, "then", [], [], outs, [])
    other = _body(model.graph, "else", [], [], outs, [])
    node = helper.make_node("If", [CONDITION], [f"{o.name}.out" for o in outs], name="/wrap/If",
                            then_branch=then, else_branch=other)
    inputs = [*_weights_free_inputs(model), helper.make_tensor_value_info(CONDITION, TensorProto.BOOL, [])]
    outputs = [helper.make_tensor_value_info(f"{o.name}.out", o.type.tensor_type.elem_type, None) for o in outs]
    return _model(model, [node], inputs, outputs, list(model.graph.initializer))


def wrapped_in_loop(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model's graph as the body of a Loop run once, its weights in the body; each output a
    scan output (one leading dim of 1)."""
    outs = list(model.graph.output)
    body_inputs = [helper.make_tensor_value_info("gf_test_i", TensorProto.INT64, []),
                   helper.make_tensor_value_info("gf_test_cond_in", TensorProto.BOOL, [])]
    keep = helper.make_node("Identity", ["gf_test_cond_in"], ["gf_test_cond_out"], name="/wrap/cond")
    body_outputs = [helper.make_tensor_value_info("gf_test_cond_out", TensorProto.BOOL, []), *outs]
    body = _body(model.graph, "body", body_inputs, [keep], body_outputs, list(model.graph.initializer))
    trips = numpy_helper.from_array(np.array(1, np.int64), "gf_test_trips")
    node = helper.make_node("Loop", ["gf_test_trips", ""], [f"{o.name}.out" for o in outs], name="/wrap/Loop", body=body)
    outputs = [helper.make_tensor_value_info(f"{o.name}.out", o.type.tensor_type.elem_type, None) for o in outs]
    return _model(model, [node], _weights_free_inputs(model), outputs, [trips])


def matches(model: onnx.ModelProto, pass_name: str, trt: str | None, bodies: bool) -> list[str]:
    """Nodes ``pass_name`` would still rewrite for ``trt``: inside If/Loop/Scan bodies, or in the main graph."""
    p = passes.get(pass_name)
    graph = to_graph(model)
    version = TrtVersion(trt) if trt else None
    left = []
    for g in list(all_graphs(graph))[1:] if bodies else [graph]:
        g.opset = graph.opset
        ctx = Context(g, Builder(g), Folder(g), version)
        left += [f"{n.op}:{n.name}" for n in g.nodes if p.match(n, ctx)]
    return left


def strictly_inferred(model: onnx.ModelProto) -> None:
    """onnx's strict shape inference and full checker accept the model (raise otherwise)."""
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
