"""What a pass is: a named rewrite of TensorRT-rejected patterns, declared once in one module.

A pass module defines ``PASS = Pass(...)``: its CLI/API/report name, a one-line summary, the op
types it looks at, its **rules** and its ``rewrite``; its place in the pipeline is its line in
``graphfix.passes.PIPELINE``.

A :class:`Rule` is one reason a TensorRT release rejects (or miscomputes) a node: its kind (no
importer, an input that must be weights, a type, an attribute/mode outside the release's limits,
known wrong results), the releases it holds for, a predicate, the errors.json id of the message
TensorRT prints, and the evidence it rests on. Everything else is derived from the rules, so it
cannot disagree: ``match`` (a rule holds for the target), ``needed_by`` (the union of the rule
ranges), ``fixes`` (their error ids), and `graphfix check`'s findings (the rule that holds).

Contract checked on every run (see :meth:`Pass.run_on_graph` and ``graphfix.pipeline.run``):
*requires* — the pass only sees nodes of its ``ops``; *ensures* — after the pass no node it
matches is left except those it reported as findings (``Skip``), and the graph's input/output
names, dtypes and shapes are unchanged. ``changed`` counts the edits actually made.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from graphfix.analysis.fold import Folder
from graphfix.graph import Builder, to_graph, to_model
from graphfix.graph.build import Skip
from graphfix.graph.edits import Edit, EditLog, live_nodes, nodes_of
from graphfix.graph.importer import all_graphs
from graphfix.trt.support import describe_range
from graphfix.trt.versions import TrtVersion, VersionRange

# Rule kinds: the specific thing a TensorRT release objects to.
NO_IMPORTER = "no-importer"
MUST_BE_WEIGHTS = "must-be-weights"
TYPE = "unsupported-type"
LIMIT = "outside-limits"
WRONG_RESULTS = "wrong-results"
KINDS = (NO_IMPORTER, MUST_BE_WEIGHTS, TYPE, LIMIT, WRONG_RESULTS)


@dataclass
class Finding:
    """A matched node the pass did not rewrite, and why (shown in reports and `graphfix check`)."""

    node: str
    op: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"node": self.node, "op": self.op, "message": self.message}


@dataclass
class Context:
    """What a rewrite gets besides the node: the graph, a builder, a folder and the user's target.

    ``trt`` None means "any release >= 7.0" (every rule counts); ``force`` makes the pass rewrite
    every node its ``forced`` predicate accepts, whatever the target.
    """

    graph: gs.Graph
    builder: Builder
    folder: Folder
    trt: TrtVersion | None = None
    force: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def opset(self) -> int:
        return self.graph.opset

    def memo(self, key: str, make: Callable[[Folder], Any]) -> Any:
        """One analysis (a memoised walk over values) per pass run or check, built on this
        context's folder: predicates that ask it per node stay linear in the graph."""
        cached = self.options.get(key)
        if cached is None or cached.folder is not self.folder:
            cached = self.options[key] = make(self.folder)
        return cached


Predicate = Callable[[gs.Node, Context], bool]
Rewrite = Callable[[gs.Node, Context], None]


@dataclass(frozen=True)
class Rule:
    """One reason a TensorRT release rejects a node (or computes it wrongly)."""

    kind: str
    versions: str
    message: str
    when: Predicate | None = None
    ops: frozenset[str] | None = None
    error: str | None = None
    #: Where this is known from: "operator table", "importer source", "changelog 10.0", an issue.
    evidence: str = ""
    #: False where the evidence is thin (the finding then says "uncertain").
    certain: bool = True
    #: Quote the example of ``error`` (errors.json) that holds this text.
    quote: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"rule kind {self.kind!r} is not one of {KINDS}")

    @cached_property
    def range(self) -> VersionRange:
        return VersionRange(self.versions)

    def pattern(self, node: gs.Node, ctx: Context) -> bool:
        """The node has this rule's pattern, whatever the release."""
        return (self.ops is None or node.op in self.ops) and (self.when is None or self.when(node, ctx))

    def holds(self, node: gs.Node, ctx: Context) -> bool:
        """The node has the pattern and the target release (if any) is one this rule is about."""
        if ctx.trt is not None and ctx.trt not in self.range:
            return False
        return self.pattern(node, ctx)


@dataclass(frozen=True)
class PassResult:
    model: onnx.ModelProto
    matched: int
    rewritten: int
    findings: list[Finding]
    nodes_before: int
    nodes_after: int
    seconds: float
    edits: tuple[Edit, ...] = ()

    @property
    def changed(self) -> bool:
        return any(e.changed for e in self.edits) if self.edits else self.rewritten > 0


@dataclass(frozen=True)
class Pass:
    name: str
    summary: str
    ops: frozenset[str]
    rules: tuple[Rule, ...]
    rewrite: Rewrite
    doc: str = ""
    #: What ``--force NAME`` rewrites (default: every node with any rule's pattern).
    forced: Predicate | None = None
    #: The node domains this pass rewrites: the ONNX domain's by default, so that onnxruntime's
    #: com.microsoft namesakes (Attention, RotaryEmbedding, LayerNormalization: other inputs and
    #: semantics) are left alone. A lowering of onnxruntime's contrib ops names their domain here,
    #: and ``check`` then names it as the fix for those ops' plugin findings.
    domains: frozenset[str] = frozenset({"", "ai.onnx"})
    #: False for a rewrite that changes results by design (re-quantizing, dequantizing): it is
    #: never in ``PIPELINE``, so ``all``/``auto``/a pass list never run it; only its own run
    #: option does, as a whole-model step judged by a documented bound (graphfix.passes.OPT_IN).
    exact: bool = True

    # ------------------------------------------------------------ declaration, derived
    @cached_property
    def versions(self) -> VersionRange:
        """Union of the rule ranges: the releases that need this pass."""
        specs = [r.versions.strip() for r in self.rules]
        if any(s.lower() in ("", "all", "*") for s in specs):
            return VersionRange("all")
        return VersionRange(" || ".join(specs))

    @property
    def needed_by(self) -> str:

        return describe_range(self.versions)

    @property
    def fixes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.error for r in self.rules if r.error))

    # ----------------------------------------------------------------- matching
    def why(self, node: gs.Node, ctx: Context) -> Rule | None:
        """The first rule that holds for this node and target, or None (:meth:`Rule.holds`, in
        one loop: the pipeline asks per candidate node and again after the pass, 75,000 times
        for bench/scale.py's 25,000 Clips, and the generator and two calls per rule were half
        of it)."""
        op = node.op
        if op not in self.ops or (node.domain or "") not in self.domains:
            return None
        trt = ctx.trt
        for r in self.rules:
            if trt is not None and trt not in r.range:
                continue
            if (r.ops is None or op in r.ops) and (r.when is None or r.when(node, ctx)):
                return r
        return None

    def match(self, node: gs.Node, ctx: Context) -> bool:
        if node.op not in self.ops or (node.domain or "") not in self.domains:
            return False
        if ctx.force:
            return self.forced(node, ctx) if self.forced is not None else any(r.pattern(node, ctx) for r in self.rules)
        return self.why(node, ctx) is not None

    def why_not(self, node: gs.Node, ctx: Context) -> str:
        """Why ``match`` does not fire on ``node`` (for `graphfix explain --model`)."""
        if node.op not in self.ops:
            return f"{self.name} rewrites {', '.join(sorted(self.ops))}, not {node.op}"
        if (node.domain or "") not in self.domains:
            return f"{self.name} rewrites the ONNX domain's {node.op}, not {node.domain}::{node.op}"
        target = f"TensorRT {ctx.trt}" if ctx.trt is not None else "any release"
        reasons = []
        for r in self.rules:
            if not r.pattern(node, ctx):
                reasons.append(f"not {r.message!r}")
            elif ctx.trt is not None and ctx.trt not in r.range:
                reasons.append(f"{r.message!r} only matters for TensorRT {r.versions}")
        return f"{self.name} sees nothing {target} rejects here: " + "; ".join(reasons)

    # ------------------------------------------------------------------ running
    def run_on_graph(
        self, graph: gs.Graph, trt: TrtVersion | None = None, force: bool = False, log: EditLog | None = None
    ) -> tuple[int, int, list[Finding]]:
        """Rewrite every matching node of ``graph`` and of its If/Loop/Scan bodies, in place.

        Returns (matched, rewritten, findings). Each live node is visited once (nodes an earlier
        pass replaced are skipped); every rewrite is recorded in ``log`` (what it added and
        replaced) so it can be undone alone.
        """
        log = log if log is not None else EditLog()
        matched, rewritten, findings = 0, 0, []
        shared: dict = {"n": 0, "taken": None, "root": graph}
        # Innermost bodies first: a rewrite that installs a copy of a body (if-inline, scan-normalize)
        # then copies nodes already rewritten, not ones this pass would never visit.
        for g in reversed(list(all_graphs(graph))):
            g.opset = graph.opset
            ctx = Context(g, Builder(g, self.name, shared), Folder(g), None if force else trt, force)
            typed = nodes_of(g, self.ops)
            if not typed:
                continue
            live = live_nodes(g)  # a node an earlier pass replaced stays in g.nodes until cleanup: skip it
            candidates = [n for n in typed if id(n) in live and self.match(n, ctx)]
            matched += len(candidates)
            for node in candidates:
                ctx.builder = Builder(g, node.name or node.op, shared)
                edit = log.begin(self.name, node, g, graph)
                try:
                    self.rewrite(node, ctx)
                except Skip as why:
                    log.abandon(edit)
                    findings.append(Finding(node.name, node.op, str(why)))
                    continue
                except Exception:
                    log.abandon(edit)
                    raise
                log.commit(edit)
                rewritten += edit.changed
        return matched, rewritten, findings

    def apply(self, model: onnx.ModelProto, trt: TrtVersion | str | None = None, force: bool = False) -> PassResult:
        """Run this pass alone on a ModelProto, unverified (the pipeline adds verification)."""
        start = time.perf_counter()
        if not _has_op(model.graph, self.ops):
            n = len(model.graph.node)
            return PassResult(model, 0, 0, [], n, n, time.perf_counter() - start)
        graph = to_graph(model)
        before = len(graph.nodes)
        version = TrtVersion(trt) if isinstance(trt, str) else trt
        log = EditLog()
        matched, rewritten, findings = self.run_on_graph(graph, version, force, log)
        out = to_model(graph, model) if rewritten else model
        after = len(graph.nodes) if rewritten else before
        return PassResult(out, matched, rewritten, findings, before, after, time.perf_counter() - start, tuple(log.edits))

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
