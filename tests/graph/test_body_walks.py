"""Walks over If/Loop/Scan bodies cost the body, not the model (bench/subgraph_scale.py: 40k nodes in
4,440 bodies took 272 s, 25x the time of 10k nodes, before both changes tested here).

A chain of ``n`` Relus in the main graph, then ``k`` Ifs on a graph input whose branches each read
the previous If's output (an outer name) and add one node."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper
from onnx_graphsurgeon.importers import onnx_importer

from fixtures.recipes._onnx import inp, model, node, out
from graphfix.graph import to_graph
from graphfix.graph.edits import live_nodes
from graphfix.graph.importer import all_graphs

FLOAT = TensorProto.FLOAT


def _chain_then_ifs(n: int, k: int) -> onnx.ModelProto:
    nodes, x = [], "x"
    for j in range(n):
        nodes.append(node("Relu", [x], [f"r{j}"], name=f"/Relu_{j}"))
        x = f"r{j}"
    for j in range(k):
        branches = {side: helper.make_graph([node(op, [x], [f"{side}{j}"], name=f"/{side}{j}")], f"{side}{j}", [],
                                           [helper.make_tensor_value_info(f"{side}{j}", FLOAT, [2])])
                    for side, op in (("then", "Neg"), ("else", "Abs"))}
        nodes.append(node("If", ["c"], [f"y{j}"], name=f"/If_{j}", then_branch=branches["then"], else_branch=branches["else"]))
        x = f"y{j}"
    return model(nodes, [inp("x", FLOAT, [2]), inp("c", TensorProto.BOOL, [])], [out(x, FLOAT, [2])], opset=17)


def test_a_body_s_live_sweep_stays_in_the_body():
    """Before: the sweep from a branch's outputs followed the outer tensor it reads to its producer
    and on through the main graph, once per body (its live set held the main graph's nodes)."""
    graph = to_graph(_chain_then_ifs(50, 3))
    bodies = list(all_graphs(graph))[1:]
    assert len(bodies) == 6
    for body in bodies:
        assert live_nodes(body) == {id(n) for n in body.nodes}, body.name
    assert len(live_nodes(graph)) == 53


def test_the_import_hands_no_body_a_copy_of_the_enclosing_tensors(monkeypatch):
    """Before: onnx-graphsurgeon's importer merged every enclosing tensor map into a new dict for
    each body (``misc.combine_dicts``): the size of the model once per body. Outer tensors a branch
    reads are still the main graph's objects."""
    copies = []
    combine = onnx_importer.misc.combine_dicts
    monkeypatch.setattr(onnx_importer.misc, "combine_dicts", lambda a, b: copies.append(len(a) + len(b)) or combine(a, b))
    graph = to_graph(_chain_then_ifs(50, 3))
    assert copies == []
    last = next(t for t in graph.nodes[-2].outputs)
    then = graph.nodes[-1].attrs["then_branch"]
    assert then.nodes[0].inputs[0] is last
