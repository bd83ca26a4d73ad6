"""Each rewritten region's cost in the report: FLOPs and bytes moved before and after, per region in
the JSON, summed per pass in the Markdown and HTML (issue 24: what a rewrite costs, before deploying)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import graphfix
from fixtures.recipes._onnx import FLOAT, INT64, init, inp, model, node, out
from graphfix.graph.cost import node_cost
from graphfix.report import markdown as markdown_mod
from graphfix.report import writer
from graphfix.report.html import page
from graphfix.report.model import KEPT, ROLLED_BACK, Report
from graphfix.report.summary import cost_cells, pass_costs

F32, I64 = 1, 7  # onnx element types: FLOAT, INT64


def _einsum(dims_a, dims_b, dims_y):
    return model([node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")], [inp("a", FLOAT, dims_a), inp("b", FLOAT, dims_b)],
                 [out("y", FLOAT, dims_y)], [], opset=17)


def test_einsum_as_matmul_costs_its_multiply_adds(tmp_path):
    """A [4,5] x [5,6] Einsum (one operation per element of its largest tensor: 30) becomes a MatMul
    of 2*4*6*5 = 240 FLOPs (8x); bytes are the same three fp32 tensors either way."""
    result = graphfix.fix(_einsum([4, 5], [5, 6], [4, 6]), ["einsum-to-matmul"])
    assert [n.op_type for n in result.model.graph.node] == ["MatMul"]
    path = tmp_path / "r.json"
    writer.write(result.report, path)
    (region,) = json.loads(path.read_text())["nodes"]
    assert region["cost"] == {"flops_before": 30, "flops_after": 240, "bytes_before": (20 + 30 + 24) * 4,
                              "bytes_after": (20 + 30 + 24) * 4, "unknown_nodes": 0}
    assert {"passes", "nodes", "outputs", "verdict", "checked", "diagram"} <= region.keys()  # additive


def _scatter_add_by_edges(nodes: int, edges: int, features: int):
    """torch_geometric's message passing: ``out.scatter_add_(0, index.view(-1, 1).expand_as(src), src)``."""
    return model([node("Reshape", ["i", "column_shape"], ["col"]), node("Shape", ["u"], ["u_shape"]),
                  node("Expand", ["col", "u_shape"], ["idx"]),
                  node("ScatterElements", ["x", "idx", "u"], ["y"], axis=0, reduction="add")],
                 [inp("x", FLOAT, [nodes, features]), inp("i", INT64, [edges]), inp("u", FLOAT, [edges, features])],
                 [out("y", FLOAT, [nodes, features])], [init("column_shape", np.array([-1, 1], np.int64))], opset=18)


def test_scatter_reduction_as_one_hot_matmul_reports_its_factor():
    """ScatterElements(add) of 11 edges x 3 features into 7 nodes: one operation per element of its
    largest tensor (33) before; after, three [7,11] x [11,3] MatMuls (the sum and the two counts of
    infinite updates: 3 x 2*7*3*11 = 1386) plus elementwise work on at most 7*11 elements per node.
    The Markdown and HTML reports show the same per-pass totals and factor as the JSON."""
    n, e, f = 7, 11, 3
    result = graphfix.fix(_scatter_add_by_edges(n, e, f), ["scatterelements-decompose"])
    ops = [x.op_type for x in result.model.graph.node]
    assert "ScatterElements" not in ops and ops.count("MatMul") == 3
    (region,) = result.report.nodes
    cost = region["cost"]
    assert cost["flops_before"] == e * f
    assert cost["bytes_before"] == (n * f + e * f + n * f) * 4 + e * f * 8  # x, u, y in fp32; the indices int64
    new_nodes = len(result.model.graph.node) - 3  # Reshape, Shape, Expand stay (the column feeds the one-hot)
    matmuls = 3 * 2 * n * f * e
    assert matmuls <= cost["flops_after"] <= matmuls + n * e * new_nodes
    assert cost["flops_after"] / cost["flops_before"] > 40

    ((passes, regions, sums),) = pass_costs(result.report)
    assert (passes, regions) == ("scatterelements-decompose", 1)
    assert sums == cost
    flops_cell, bytes_cell = cost_cells(sums)
    assert flops_cell == f"33 → {cost['flops_after'] / 1000:.3g}k ({cost['flops_after'] / 33:.3g}x)"
    md = markdown_mod.markdown(result.report)
    assert "## What the rewrites cost" in md
    assert f"| scatterelements-decompose | 1 | {flops_cell} | {bytes_cell} | {cost['unknown_nodes']} |" in md
    html = page(result.report)
    assert "What the rewrites cost" in html and flops_cell in html


def test_symbolic_sizes_are_counted_not_guessed():
    """Dims graphfix's inference leaves symbolic give no estimate: the nodes are counted apart."""
    result = graphfix.fix(_einsum(["m", "k"], ["k", "n"], ["m", "n"]), ["einsum-to-matmul"], verify=False)
    assert result.report.nodes == []  # no region records without verification
    result = graphfix.fix(_einsum(["m", "k"], ["k", "n"], ["m", "n"]), ["einsum-to-matmul"],
                          input_shapes={"a": [2, 3], "b": [3, 4]})
    (region,) = result.report.nodes
    assert region["cost"] == {"flops_before": 0, "flops_after": 0, "bytes_before": 0, "bytes_after": 0, "unknown_nodes": 2}


def test_only_kept_regions_count_in_the_pass_totals():
    rep = Report(None, None, {})
    cost = {"flops_before": 10, "flops_after": 40, "bytes_before": 8, "bytes_after": 8, "unknown_nodes": 1}
    rep.nodes = [{"passes": ["a"], "verdict": KEPT, "cost": cost}, {"passes": ["a"], "verdict": ROLLED_BACK, "cost": cost},
                 {"passes": ["a", "b"], "verdict": KEPT, "cost": cost}, {"passes": ["c"], "verdict": KEPT}]
    totals = {k: (n, sums) for k, n, sums in pass_costs(rep)}
    assert totals == {"a": (1, cost), "a, b": (1, cost)}
    assert cost_cells(cost) == ["10 → 40 (4x)", "8 → 8 (1x)"]


@pytest.mark.parametrize("op,ins,outs,trans_a,flops", [
    ("MatMul", [((2, 3, 4), F32), ((4, 5), F32)], [((2, 3, 5), F32)], False, 2 * 30 * 4),
    ("Gemm", [((4, 3), F32), ((4, 5), F32)], [((3, 5), F32)], True, 2 * 15 * 4),  # transA: K is A's first dim
    ("Conv", [((1, 2, 8, 8), F32), ((6, 2, 3, 3), F32)], [((1, 6, 6, 6), F32)], False, 2 * 216 * 18),
    ("ConvTranspose", [((1, 2, 4, 4), F32), ((2, 6, 3, 3), F32)], [((1, 6, 6, 6), F32)], False, 2 * 32 * 54),
    ("Gather", [((10, 4), F32), ((3,), I64)], [((3, 4), F32)], False, 40),
    ("Constant", [], [((1000,), F32)], False, 0),
])
def test_node_cost_formulas(op, ins, outs, trans_a, flops):
    got = node_cost(op, ins, outs, trans_a)
    assert got is not None and got[0] == flops
    if op != "Constant":
        assert got[1] == sum(int(np.prod(d)) * (8 if t == I64 else 4) for d, t in (*ins, *outs))
    assert node_cost(op, [None, *ins[1:]], outs) is None or op == "Constant"
