"""The by-op node index the pass manager leaves for the passes before the first edit: it answers
as a scan of the graph would, drops out on any edit, and does not outlive the run."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix import passes as registry
from graphfix.graph import to_graph
from graphfix.graph.build import Builder
from graphfix.graph.edits import EditLog, index_ops, nodes_of
from graphfix.pipeline.manager import op_counts, run_passes
from graphfix.pipeline.settings import Settings
from graphfix.report.model import Report
from tests.helpers.models import weight_chain


def _scan(graph: gs.Graph, ops: frozenset[str]) -> list[gs.Node]:
    return [n for n in graph.nodes if n.op in ops]


def test_nodes_of_answers_as_a_scan_for_one_or_several_types():
    graph = to_graph(weight_chain(3, 4))
    counts = op_counts(graph)
    assert counts == {"MatMul": 3, "Constant": 3, "Cast": 3, "Clip": 3}
    for ops in ({"Clip"}, {"Cast", "Clip"}, {"MatMul", "Constant", "Clip"}, {"Relu"}, {"Relu", "Clip"}):
        assert nodes_of(graph, frozenset(ops)) == _scan(graph, frozenset(ops))


def test_an_edit_drops_the_index():
    graph = to_graph(weight_chain(2, 4))
    index_ops(graph)
    clip = nodes_of(graph, frozenset({"Clip"}))[0]
    log = EditLog()
    edit = log.begin("test", clip, graph, graph)
    y = Builder(graph, "t").op("Relu", [clip.inputs[0]], dtype=np.float32)
    clip.inputs[0] = y
    log.commit(edit)
    assert [n.op for n in nodes_of(graph, frozenset({"Relu"}))] == ["Relu"]
    assert nodes_of(graph, frozenset({"Clip", "Relu"})) == _scan(graph, frozenset({"Clip", "Relu"}))


def test_the_index_does_not_outlive_run_passes():
    graph = to_graph(weight_chain(2, 4))
    run_passes(graph, [registry.get("shape-tensor-ops")], Settings(verify=False), EditLog(), Report(None, None, {}),
               lambda what: None)  # matches nothing: no edit, the generation is unchanged
    graph.nodes.reverse()  # as an export's sort may reorder them, without an edit
    assert nodes_of(graph, frozenset({"Clip"})) == _scan(graph, frozenset({"Clip"}))
    assert "gf_ops" not in graph.__dict__
