"""A log of every rewrite a pass makes, so each one can be verified and undone on its own.

Passes edit one shared onnx-graphsurgeon graph. Before a matched node is rewritten the log
snapshots it (op, inputs, outputs, attributes); while it is rewritten it records the nodes the
rewrite appends and every tensor whose producer :func:`graphfix.graph.replace_tensor` moves.
That is enough to undo one rewrite without copying the graph (or its weights), and to know which
nodes and tensors a rewrite's region is made of (node-level verification and rollback).
New nodes' output types and shapes are inferred right away, node by node, so later passes see
dtypes without a whole-model shape inference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_graphsurgeon as gs

from graphfix.graph.infer import infer_nodes
from graphfix.graph.state import _active, _edited, _generation


@dataclass(eq=False)
class Edit:
    """One rewrite of one matched node."""

    pass_name: str
    node: gs.Node
    graph: gs.Graph
    root: gs.Graph
    start: int
    saved: tuple
    added: list[gs.Node] = field(default_factory=list)
    replaced: list[tuple[gs.Variable, gs.Node, int]] = field(default_factory=list)
    changed: bool = False
    undone: bool = False

    @property
    def in_subgraph(self) -> bool:
        return self.graph is not self.root

    def undo(self) -> None:
        """Put the graph back as it was before this rewrite (the added nodes are disconnected)."""
        if self.undone:
            return
        _edited()
        for n in self.added:
            _detach(n)
        gone = {id(n) for n in self.added}
        if gone:
            self.graph.nodes[:] = [n for n in self.graph.nodes if id(n) not in gone]
        for tensor, producer, idx in reversed(self.replaced):
            if idx < len(producer.outputs):
                producer.outputs[idx] = tensor
        op, inputs, outputs, attrs = self.saved
        node = self.node
        node.op = op
        if list(node.inputs) != inputs:
            node.inputs.clear()
            node.inputs.extend(inputs)
        if list(node.outputs) != outputs:
            node.outputs.clear()
            node.outputs.extend(outputs)
        node.attrs.clear()
        node.attrs.update(attrs)
        _revive(self.graph, [node, *(producer for _, producer, _ in self.replaced)])
        self.undone = True


def _detach(node: gs.Node) -> None:
    """Disconnect an added node from the tensors it reads and writes, where they still list it:
    a branch that if-inline copied into a body reads outer tensors whose consumer lists need not
    name the copy, and onnx-graphsurgeon's own ``clear()`` raised ValueError on those (an undone
    if-inline inside an If branch took the run down)."""
    for ends, back in ((node.inputs, "outputs"), (node.outputs, "inputs")):
        for t in list(ends):
            listed = getattr(t, back)
            at = next((i for i, n in enumerate(listed) if n is node), None)
            if at is not None:
                list.pop(listed, at)  # list's own: no synchronisation back into ``ends``
        list.clear(ends)


def _revive(graph: gs.Graph, restored: list[gs.Node]) -> None:
    """Put back the restored nodes and what they read that an export dropped as dead meanwhile (a
    folded Constant, the node a rewrite replaced): the next export sorts them back into place."""
    pruned = graph.__dict__.get("gf_pruned")
    if not pruned:
        return
    for node in restored:
        if pruned.pop(id(node), None) is not None:
            graph.nodes.append(node)
    stack = [p for node in restored for t in _reads(node) for p in t.inputs]
    while stack:
        n = stack.pop()
        if pruned.pop(id(n), None) is not None:  # else still in the graph
            graph.nodes.append(n)
            stack.extend(p for t in _reads(n) for p in t.inputs)


def _reads(node: gs.Node) -> list[gs.Tensor]:
    """What a node reads: its inputs and what its If/Loop bodies read from outside (an If revived
    by undoing if-inline needs the producers its other branch reads, which the export pruned)."""
    reads = [t for t in node.inputs if t.name]
    if node.attrs:
        for sub in bodies(node):
            reads.extend(outer_reads(sub))
    return reads


def live_nodes(graph: gs.Graph) -> set[int]:
    """ids of the nodes of ``graph`` its outputs depend on (replaced nodes are dead until cleanup).

    A node with If/Loop/Scan bodies keeps alive the outer tensors its bodies read. Computed once
    per graph state: the pipeline asks before each pass that has candidates and again at export
    (a whole-graph sweep each, 0.2 s at 100k nodes), and between two edits the answer is the same.
    The cache holds while no edit started, ended or was undone and the graph keeps its node count
    and outputs (a copied graph has other output tensors): code that rewires a graph outside an
    :class:`EditLog` after asking drops ``graph.gf_live`` first (none does: fix-shapes' folding
    runs on a fresh import).
    """
    key = (_generation[0], len(graph.nodes), tuple([id(t) for t in graph.outputs]))
    cached = graph.__dict__.get("gf_live")
    if cached is not None and cached[0] == key and not _active:
        return cached[1]
    live = _live_nodes(graph)
    if not _active:  # mid-rewrite the graph changes without a bump: never cached
        graph.__dict__["gf_live"] = (key, live)
    return live


def index_ops(graph: gs.Graph) -> dict[str, list[gs.Node]]:
    """``graph``'s nodes by op type, each list in graph order, left on the graph for its state
    (the edit generation and node count): until the next edit, :func:`nodes_of` answers from it
    instead of a scan. The pass manager builds it where it counts op types before the passes and
    drops it after them (an export sorts the nodes without an edit). On bench/scale.py the two
    passes that look at its 25,000 Clips before the first rewrite each scanned 100k nodes (30 ms)."""
    index: dict[str, list[gs.Node]] = {}
    for n in graph.nodes:
        same = index.get(n.op)
        if same is None:
            index[n.op] = [n]
        else:
            same.append(n)
    if not _active:
        graph.__dict__["gf_ops"] = ((_generation[0], len(graph.nodes)), index)
    return index


def nodes_of(graph: gs.Graph, ops: frozenset[str]) -> list[gs.Node]:
    """The nodes of ``graph`` of these op types, in graph order: from :func:`index_ops`'s index
    while it holds for the graph's state and at most one of the types is present, else a scan."""
    cached = graph.__dict__.get("gf_ops")
    if cached is not None and cached[0] == (_generation[0], len(graph.nodes)) and not _active:
        present = [cached[1][op] for op in ops if op in cached[1]]
        if len(present) <= 1:
            return list(present[0]) if present else []
    return [n for n in graph.nodes if n.op in ops]


def drop_op_index(graph: gs.Graph) -> None:
    graph.__dict__.pop("gf_ops", None)


def _live_nodes(graph: gs.Graph) -> set[int]:
    """Walks nodes, not tensors: a tensor read twice is looked at twice, but no set of tensors is
    kept. In a body (``gf_body``, set at import) the walk stays in the body: a tensor it reads from
    the enclosing graphs leads to their producers, and following them swept the outer graph back
    to its inputs once per body, quadratic in a model whose bodies are many (bench/subgraph_scale.py:
    40k nodes in 4,440 bodies, 215 s of live sweeps)."""
    live: set[int] = set()
    members = {id(n) for n in graph.nodes} if graph.__dict__.get("gf_body") else None
    stack: list[gs.Node] = [p for t in graph.outputs for p in t.inputs]
    while stack:
        producer = stack.pop()
        if id(producer) in live or (members is not None and id(producer) not in members):
            continue
        live.add(id(producer))
        for i in producer.inputs:
            if i.name and i.inputs:
                stack.extend(i.inputs)
        if producer.attrs:
            for sub in bodies(producer):
                for i in outer_reads(sub):
                    stack.extend(i.inputs)
    return live


def bodies(node: gs.Node) -> list[gs.Graph]:
    """The If/Loop/Scan bodies among the node's attributes."""
    found = []
    for value in node.attrs.values():
        if isinstance(value, gs.Graph):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, gs.Graph))
    return found


def outer_reads(graph: gs.Graph) -> list[gs.Tensor]:
    """Tensors the nodes of a body (and its nested bodies) read."""
    reads: list[gs.Tensor] = []
    for node in graph.nodes:
        reads.extend([i for i in node.inputs if i.name])
        for sub in bodies(node):
            reads.extend(outer_reads(sub))
    return reads


class EditLog:
    """Every edit of a run, in order."""

    def __init__(self) -> None:
        self.edits: list[Edit] = []

    def begin(self, pass_name: str, node: gs.Node, graph: gs.Graph, root: gs.Graph) -> Edit:
        saved = (node.op, list(node.inputs), list(node.outputs), dict(node.attrs))
        _edited()
        edit = Edit(pass_name, node, graph, root, len(graph.nodes), saved)
        _active.append(edit)
        return edit

    def _end(self, edit: Edit) -> None:
        _edited()
        if _active and _active[-1] is edit:
            _active.pop()
        edit.added = list(edit.graph.nodes[edit.start :])

    def commit(self, edit: Edit) -> None:
        self._end(edit)
        op, inputs, outputs, attrs = edit.saved
        node = edit.node
        edit.changed = bool(
            edit.added or edit.replaced or node.op != op or list(node.inputs) != inputs
            or list(node.outputs) != outputs or attrs.keys() != node.attrs.keys()
            or any(attrs[k] is not node.attrs[k] for k in attrs)
        )
        if edit.changed:
            infer_nodes(edit.added, edit.root.opset)
            self.edits.append(edit)

    def rollback_to(self, mark: int) -> None:
        """Undo every edit after the first ``mark`` ones, newest first, and forget them."""
        for e in reversed(self.edits[mark:]):
            e.undo()
        del self.edits[mark:]

    def abandon(self, edit: Edit) -> None:
        """A rewrite that raised (``Skip`` or a bug): undo whatever it had done."""
        self._end(edit)
        edit.undo()


def note_replaced(tensor: gs.Variable, producer: gs.Node, idx: int) -> None:
    """Called by replace_tensor before it moves ``tensor`` away from ``producer``."""
    if _active:
        _active[-1].replaced.append((tensor, producer, idx))
