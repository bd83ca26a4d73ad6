"""Undo puts a graph back: an if-inline inside an If branch (its copied nodes read the outer
scope) is undone without error, and the model is the original again."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from fixtures.recipes._onnx import const, inp, model, node, out
from graphfix import passes
from graphfix.graph import to_graph, to_model
from graphfix.graph.edits import EditLog
from graphfix.onnxio.proto import all_nodes
from graphfix.trt.versions import TrtVersion
from tests.helpers.control_flow import CONDITION, wrapped_in_if
from tests.helpers.support import ort_run

FLOAT = TensorProto.FLOAT


def _rank_switching_branch_model() -> onnx.ModelProto:
    """If(x.dim() != 2) Unsqueeze(x) else Tanh(x), wrapped in both branches of an If on a flag."""
    vi = helper.make_tensor_value_info
    then = helper.make_graph([const("ax", [0], np.int64), node("Unsqueeze", ["x", "ax"], ["xu"])], "then", [], [vi("xu", FLOAT, None)])
    other = helper.make_graph([node("Tanh", ["x"], ["xt"])], "else", [], [vi("xt", FLOAT, None)])
    cell = model([node("Shape", ["x"], ["shp"]), node("Size", ["shp"], ["rank"]), const("two", 2, np.int64),
                  node("Equal", ["rank", "two"], ["batched"]), node("Not", ["batched"], ["unbatched"]),
                  node("If", ["unbatched"], ["y"], name="/If_unsqueeze", then_branch=then, else_branch=other)],
                 [inp("x", FLOAT, ["batch", 4])], [out("y", FLOAT, ["batch", 4])], opset=17)
    return wrapped_in_if(cell)


def test_an_if_inlined_inside_a_branch_is_undone():
    """Before: undo raised ValueError (list.remove) on the copied Tanh, which reads x from outside."""
    m = _rank_switching_branch_model()
    graph, log = to_graph(m), EditLog()
    _, rewritten, _ = passes.get("if-inline").run_on_graph(graph, TrtVersion("8.5"), False, log)
    assert rewritten == 2  # the cell's If in each branch
    log.rollback_to(0)
    back = to_model(graph, m)
    assert sorted(n.op_type for n in all_nodes(back.graph)) == sorted(n.op_type for n in all_nodes(m.graph))
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    for flag in (True, False):
        np.testing.assert_allclose(ort_run(back, {"x": x, CONDITION: np.array(flag)})[0], np.tanh(x), rtol=1e-6)
