"""A model's graph moved into control flow, as exporters do: both branches of an If on a graph
input (an optimum merged decoder, its weights shared by the main graph), the body of a
one-iteration Loop (a TF while_loop, its weights inside the body), the body of a Scan over its
inputs (an ONNX function expanded to Scan: the body's inputs typed by the body), or all three
nested; and small models whose network is in control flow (a merged decoder, a voice-activity
detector)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fixtures.recipes._onnx import const, inp, model, node, out
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
    # a condition input, as tf2onnx writes: without one every TensorRT release leaves the body's condition
    # input unregistered, which the Identity reads (graphfix.check.loops, loop-condition-unregistered)
    cond = numpy_helper.from_array(np.array(True), "gf_test_cond")
    node = helper.make_node("Loop", ["gf_test_trips", "gf_test_cond"], [f"{o.name}.out" for o in outs], name="/wrap/Loop",
                            body=body)
    outputs = [helper.make_tensor_value_info(f"{o.name}.out", o.type.tensor_type.elem_type, None) for o in outs]
    return _model(model, [node], _weights_free_inputs(model), outputs, [trips, cond])


#: What :func:`wrapped_in_scan` appends to each input's name: the outer sequence it scans.
SCANNED = ".seq"


def wrapped_in_scan(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model's graph as the body of a Scan over each of its inputs (``<name>.seq``, one leading
    dim of 1): the body reads its inputs as body inputs, typed by the body's own declarations, its
    weights inside the body; each output a scan output (one leading dim of 1)."""
    outs, ins = list(model.graph.output), _weights_free_inputs(model)
    body = _body(model.graph, "body", ins, [], outs, list(model.graph.initializer))
    outer = []
    for vi in ins:
        t = vi.type.tensor_type
        dims = [1, *[d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]]
        outer.append(helper.make_tensor_value_info(f"{vi.name}{SCANNED}", t.elem_type, dims))
    node = helper.make_node("Scan", [o.name for o in outer], [f"{o.name}.out" for o in outs], name="/wrap/Scan",
                            body=body, num_scan_inputs=len(ins))
    outputs = [helper.make_tensor_value_info(f"{o.name}.out", o.type.tensor_type.elem_type, None) for o in outs]
    return _model(model, [node], outer, outputs, [])


def wrapped_three_deep(model: onnx.ModelProto) -> onnx.ModelProto:
    """Both branches of an If, each a Scan over the inputs whose body is a one-iteration Loop
    holding the model: every kind of body, nested."""
    return wrapped_in_if(wrapped_in_scan(wrapped_in_loop(model)))


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


# ---------------------------------------------------------------- models in control flow
def _norm(source: str) -> list[onnx.NodeProto]:
    return [node("Gather", ["pos_table", "/Range_output_0"], ["/Gather_1_output_0"], axis=0),
            node("Add", [source, "/Gather_1_output_0"], ["/Add_output_0"]),
            node("LayerNormalization", ["/Add_output_0", "scale", "bias"], ["/ln/LayerNormalization_output_0"],
                 name="/ln/LayerNormalization", axis=-1, epsilon=1e-5)]


def _without_past() -> onnx.GraphProto:
    """Positions 0..seq: ``/Cast_output_0`` is a float here."""
    nodes = [node("Shape", ["x"], ["/Shape_output_0"]), const("/Constant_output_0", 1, np.int64),
             node("Gather", ["/Shape_output_0", "/Constant_output_0"], ["/Gather_output_0"], axis=0),
             node("Cast", ["/Gather_output_0"], ["/Cast_output_0"], to=TensorProto.FLOAT),
             node("Cast", ["/Cast_output_0"], ["/Cast_1_output_0"], to=TensorProto.INT64),
             const("/Constant_1_output_0", 0, np.int64), const("/Constant_2_output_0", 1, np.int64),
             node("Range", ["/Constant_1_output_0", "/Cast_1_output_0", "/Constant_2_output_0"], ["/Range_output_0"]),
             *_norm("x")]
    return helper.make_graph(nodes, "no_past", [], [helper.make_tensor_value_info("/ln/LayerNormalization_output_0", TensorProto.FLOAT, None)])


def _with_past() -> onnx.GraphProto:
    """Positions past..past+seq: the same names, ``/Cast_output_0`` an int64 (the Range's limit)."""
    nodes = [node("Shape", ["past"], ["/Shape_output_0"]), const("/Constant_output_0", 2, np.int64),
             node("Gather", ["/Shape_output_0", "/Constant_output_0"], ["/Gather_output_0"], axis=0),
             node("Shape", ["x"], ["/Shape_1_output_0"]), const("/Constant_3_output_0", 1, np.int64),
             node("Gather", ["/Shape_1_output_0", "/Constant_3_output_0"], ["/Gather_2_output_0"], axis=0),
             node("Add", ["/Gather_output_0", "/Gather_2_output_0"], ["/Cast_output_0"]),
             const("/Constant_2_output_0", 1, np.int64),
             node("Range", ["/Gather_output_0", "/Cast_output_0", "/Constant_2_output_0"], ["/Range_output_0"]),
             *_norm("x")]
    return helper.make_graph(nodes, "with_past", [], [helper.make_tensor_value_info("/ln/LayerNormalization_output_0", TensorProto.FLOAT, None)])


def merged_decoder() -> onnx.ModelProto:
    weights = [numpy_helper.from_array(np.random.default_rng(0).random((64, 8), np.float32), "pos_table"),
               numpy_helper.from_array(np.full(8, 1.5, np.float32), "scale"), numpy_helper.from_array(np.full(8, 0.25, np.float32), "bias")]
    nodes = [node("If", ["use_cache"], ["y"], name="/If", then_branch=_with_past(), else_branch=_without_past())]
    return model(nodes, [inp("x", TensorProto.FLOAT, ["b", "s", 8]), inp("past", TensorProto.FLOAT, ["b", 2, "p", 8]), inp("use_cache", TensorProto.BOOL, [])],
                 [out("y", TensorProto.FLOAT, ["b", "s", 8])], weights, opset=17)


def _vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


def voice_activity_detector() -> onnx.ModelProto:
    """A TorchScript-exported detector in miniature: ``if sr == 16000`` chooses the front end; in
    the 16 kHz branch, ``if x.dim() == 1: x = x.unsqueeze(0)`` (branches of different ranks)."""
    rank_then = helper.make_graph([const("ax", [0], np.int64), node("Unsqueeze", ["x", "ax"], ["xu"])], "unbatched", [], [_vi("xu")])
    rank_else = helper.make_graph([node("Identity", ["x"], ["xi"])], "batched", [], [_vi("xi")])
    sr16k = helper.make_graph(
        [node("Shape", ["x"], ["shp"]), node("Size", ["shp"], ["rank"]), const("one", 1, np.int64),
         node("Equal", ["rank", "one"], ["is1d"]),
         node("If", ["is1d"], ["x2"], name="/If_rank", then_branch=rank_then, else_branch=rank_else),
         const("half", [0.5], np.float32), node("Mul", ["x2", "half"], ["a"])], "sr16k", [], [_vi("a")])
    sr8k = helper.make_graph([const("two", [2.0], np.float32), node("Mul", ["x", "two"], ["b"])], "sr8k", [], [_vi("b")])
    nodes = [const("k16000", 16000, np.int64), node("Equal", ["sr", "k16000"], ["is16k"]),
             node("If", ["is16k"], ["h"], name="/If_sr", then_branch=sr16k, else_branch=sr8k), node("Tanh", ["h"], ["y"])]
    return model(nodes, [inp("x", TensorProto.FLOAT, ["batch", 8]), inp("sr", TensorProto.INT64, [])], [out("y", TensorProto.FLOAT, ["batch", 8])], opset=17)


