"""What a pass is: a named rewrite of one TensorRT-rejected pattern, declared in one module.

A pass module defines ``PASS = Pass(...)``: its CLI/API/report name, its place in the pipeline,
a one-line summary, the ids of the TensorRT errors it fixes (``graphfix/trt/data/errors.json``),
the parser versions that need it, a cheap ``match`` predicate and the ``rewrite``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, Folder, to_graph, to_model
from graphfix.graph.convert import all_graphs
from graphfix.trt.versions import TrtVersion, VersionRange


@dataclass
class Finding:
    """A matched node the pass did not rewrite, and why (shown in reports and `graphfix check`)."""

    node: str
    op: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"node": self.node, "op": self.op, "message": self.message}


class Skip(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by a rewrite to leave a matched node as it is, with the reason as a finding."""


@dataclass
class Context:
    """What a rewrite gets besides the node: the graph, a builder, a folder and the user's target."""

    graph: gs.Graph
    builder: Builder
    folder: Folder
    trt: TrtVersion | None = None
    force: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def opset(self) -> int:
        return self.graph.opset


@dataclass
class PassResult:
    model: onnx.ModelProto
    matched: int
    rewritten: int
    findings: list[Finding]
    nodes_before: int
    nodes_after: int
    seconds: float

    @property
    def changed(self) -> bool:
        return self.rewritten > 0


Match = Callable[[gs.Node, Context], bool]
Rewrite = Callable[[gs.Node, Context], None]


@dataclass(frozen=True)
class Pass:
    name: str
    order: int
    summary: str
    fixes: tuple[str, ...]
    needed_by: str
    match: Match
    rewrite: Rewrite
    doc: str = ""
    #: Op types ``match`` can accept. When set, a model without any of them is skipped without
    #: building a graph (most passes match nothing in most models; import/export is the cost).
    ops: frozenset[str] | None = None
    #: The rejected pattern in one line, as `graphfix check` words a finding.
    problem: str = ""

    @property
    def versions(self) -> VersionRange:
        return VersionRange(self.needed_by)

    def run_on_graph(self, graph: gs.Graph, trt: TrtVersion | None = None, force: bool = False) -> tuple[int, int, list[Finding]]:
        """Rewrite every matching node of ``graph`` and of its If/Loop/Scan bodies, in place.

        Returns (matched, rewritten, findings). Each node is visited once.
        """
        matched, findings = 0, []
        shared: dict = {"n": 0, "taken": None, "root": graph}
        for g in list(all_graphs(graph)):
            g.opset = graph.opset
            # force: match as if no target accepted anything (then each pass's own force rules)
            ctx = Context(g, Builder(g, self.name, shared), Folder(g), None if force else trt, force)
            candidates = [n for n in g.nodes if self.match(n, ctx)]
            matched += len(candidates)
            for node in candidates:
                ctx.builder = Builder(g, node.name or node.op, shared)
                try:
                    self.rewrite(node, ctx)
                except Skip as why:
                    findings.append(Finding(node.name, node.op, str(why)))
        return matched, matched - len(findings), findings

    def apply(self, model: onnx.ModelProto, trt: TrtVersion | str | None = None, force: bool = False) -> PassResult:
        """Run this pass alone, unverified (the pipeline adds onnxruntime verification)."""
        start = time.perf_counter()
        if self.ops is not None and not _has_op(model.graph, self.ops):
            n = len(model.graph.node)
            return PassResult(model, 0, 0, [], n, n, time.perf_counter() - start)
        graph = to_graph(model)
        before = len(graph.nodes)
        version = TrtVersion(trt) if isinstance(trt, str) else trt
        matched, rewritten, findings = self.run_on_graph(graph, version, force)
        out = to_model(graph, model) if rewritten else model
        after = len(graph.nodes) if rewritten else before
        return PassResult(out, matched, rewritten, findings, before, after, time.perf_counter() - start)

    def __call__(self, model: onnx.ModelProto, **kw: Any) -> onnx.ModelProto:
        return self.apply(model, **kw).model


def _has_op(graph: onnx.GraphProto, ops: frozenset[str]) -> bool:
    """Any node of these types, subgraphs (If/Loop bodies) included."""
    for node in graph.node:
        if node.op_type in ops:
            return True
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH and _has_op(attr.g, ops):
                return True
            if attr.type == onnx.AttributeProto.GRAPHS and any(_has_op(g, ops) for g in attr.graphs):
                return True
    return False
