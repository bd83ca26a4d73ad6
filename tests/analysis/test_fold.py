"""The Folder's walk: every value computed once, after its inputs, on shared and deep chains too;
what it must not fold stays unknown."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphfix.analysis.fold import Folder
from graphfix.graph import to_graph


def _graph(nodes: list[onnx.NodeProto], out: str, inputs=()) -> gs.Graph:
    model = helper.make_model(
        helper.make_graph(nodes, "g", list(inputs), [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)])
    return to_graph(model)


def _const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value)))


def _tensor(graph: gs.Graph, name: str) -> gs.Tensor:
    return next(t for n in graph.nodes for t in n.outputs if t.name == name)


def _counting(monkeypatch) -> list[str]:
    seen: list[str] = []
    compute = Folder._compute

    def counted(self, t, node):
        seen.append(t.name)
        return compute(self, t, node)

    monkeypatch.setattr(Folder, "_compute", counted)
    return seen


def test_shared_inputs_are_computed_once_each_after_their_inputs(monkeypatch):
    # c -> a = Cast(c); b = Add(a, a); d = Mul(a, b); e = Sub(d, b): a and b are read twice
    graph = _graph([_const("c", np.array([1.5, -2.0], np.float64)),
                    helper.make_node("Cast", ["c"], ["a"], to=TensorProto.FLOAT),
                    helper.make_node("Add", ["a", "a"], ["b"]),
                    helper.make_node("Mul", ["a", "b"], ["d"]),
                    helper.make_node("Sub", ["d", "b"], ["e"])], "e")
    seen = _counting(monkeypatch)
    a = np.array([1.5, -2.0], np.float32)
    np.testing.assert_array_equal(Folder(graph).value(_tensor(graph, "e")), a * (a + a) - (a + a))
    assert sorted(seen) == ["a", "b", "c", "d", "e"]


def test_a_deep_chain_folds_without_recursion():
    depth = 5000
    nodes = [_const("v0", np.float32(0))] + [helper.make_node("Add", [f"v{k}", "one"], [f"v{k + 1}"]) for k in range(depth)]
    graph = _graph([_const("one", np.float32(1)), *nodes], f"v{depth}")
    assert Folder(graph).value(_tensor(graph, f"v{depth}")) == depth


@pytest.mark.parametrize("op", ["RandomNormalLike", "If"])
def test_what_must_not_fold_stays_unknown_and_so_do_its_users(op):
    branch = helper.make_graph([_const("k", np.float32(1))], "b", [], [helper.make_tensor_value_info("k", TensorProto.FLOAT, [])])
    made = (helper.make_node("RandomNormalLike", ["c"], ["r"]) if op == "RandomNormalLike"
            else helper.make_node("If", ["cond"], ["r"], then_branch=branch, else_branch=branch))
    graph = _graph([_const("c", np.float32(2)), _const("cond", np.array(True)), made,
                    helper.make_node("Add", ["r", "c"], ["s"])], "s")
    folder = Folder(graph)
    assert folder.value(_tensor(graph, "s")) is None
    assert folder.value(_tensor(graph, "c")) == 2


@pytest.mark.parametrize("start,end,rank", [(None, None, 3), (1, None, 2), (-2, None, 2), (0, 1, 1), (0, 99, 3)])
def test_size_of_shape_is_the_rank_where_shapes_output_is_untyped(start, end, rank):
    """TorchScript's ``input.dim()``: Size(Shape(x)) of a typed x whose Shape output was never typed
    (x typed by a rewrite after import). Before: unknown (Size folded only from Shape's own type)."""
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    graph = _graph([helper.make_node("Shape", ["x"], ["shp"], **attrs), helper.make_node("Size", ["shp"], ["rank"]),
                    helper.make_node("Cast", ["rank"], ["y"], to=TensorProto.FLOAT)], "y")
    shp = _tensor(graph, "shp")
    x = shp.inputs[0].inputs[0]
    x.shape, shp.shape = ["batch", 4, None], None
    assert Folder(graph).value(_tensor(graph, "rank")) == rank
