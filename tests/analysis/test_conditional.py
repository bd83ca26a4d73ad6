"""An If as TensorRT's importer sees it: branch outputs in pairs, and a condition known at build time or not."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from fixtures.recipes._onnx import BOOL, FLOAT, const, init, inp, node, out
from graphfix.analysis.conditional import branch_pairs, runtime_condition
from graphfix.analysis.fold import Folder
from graphfix.graph import to_graph


def _if(condition: str, else_outputs: int = 1):
    then = helper.make_graph([node("Relu", ["x"], ["t"])], "then", [], [out("t", FLOAT, [2])])
    other = helper.make_graph([node("Neg", ["x"], [f"e{k}"]) for k in range(else_outputs)], "else", [],
                              [out(f"e{k}", FLOAT, [2]) for k in range(else_outputs)])
    nodes, inputs, inits = [], [inp("x", FLOAT, [2])], []
    if condition == "input":
        inputs.append(inp("c", BOOL, []))
    elif condition == "initializer":
        inits.append(init("c", np.bool_(True)))
    else:  # computed from a constant: folds
        nodes += [const("c0", True, np.bool_), node("Not", ["c0"], ["c"])]
    graph_proto = helper.make_graph([*nodes, node("If", ["c"], ["y"], name="/If", then_branch=then, else_branch=other)], "m",
                                    inputs, [out("y", FLOAT, [2])], inits)
    m = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # unchecked: counts may differ
    graph = to_graph(m)
    return next(n for n in graph.nodes if n.op == "If"), graph


@pytest.mark.parametrize("condition,runtime", [("input", True), ("initializer", False), ("folds", False)])
def test_runtime_condition(condition, runtime):
    if_node, graph = _if(condition)
    assert runtime_condition(if_node, Folder(graph)) is runtime


def test_branch_pairs():
    if_node, _ = _if("input")
    assert [(a.name, b.name) for a, b in branch_pairs(if_node)] == [("t", "e0")]
    assert branch_pairs(_if("input", else_outputs=2)[0]) is None
