"""Node-level verification: every rewrite checked on its own, all of them in one onnxruntime run.

After the passes have run on the shared graph, the edits are grouped into *regions*: the nodes a
rewrite added (plus the matched node when it was changed in place), merged with any other edit
they read from. A region reads tensors of the original model and recomputes tensors of the
original model (rewrites keep names). The *probe* model is the original model plus a renamed copy
of every region, its inputs wired to the original tensors: one onnxruntime session computes the
original outputs and, for every region, the original and the rewritten value of each tensor it
replaces. A region whose values differ is undone alone (node-level rollback); a final end-to-end
run of the fixed model (the second session) confirms the whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper

from graphfix.graph.cost import Cost, gs_node_cost, nodes_cost
from graphfix.graph.edits import Edit, live_nodes
from graphfix.graph.importer import all_graphs
from graphfix.graph.node_export import export_node
from graphfix.onnxio.proto import Assembled
from graphfix.verify import precision


@dataclass(eq=False)
class Region:
    key: int
    edits: list[Edit]
    nodes: list[gs.Node] = field(default_factory=list)
    #: original tensor names this region recomputes
    outputs: list[str] = field(default_factory=list)
    #: why it can only be checked end to end ("" when it is checked on its own)
    unchecked: str = ""
    #: probe output name of the rewritten value, per original tensor name
    probes: dict[str, str] = field(default_factory=dict)
    #: "float16"/"bfloat16" when the region reads, computes or writes that type (its tensors are
    #: compared at that type's tolerance, float32 ones too: graphfix.verify.precision)
    precision: str | None = None

    @property
    def passes(self) -> list[str]:
        return list(dict.fromkeys(e.pass_name for e in self.edits))

    def undo(self) -> None:
        for e in reversed(self.edits):
            e.undo()


def cost(region: Region) -> dict[str, int]:
    """What running the region costs before and after its rewrite (issue 24: a user sees what a
    rewrite costs before deploying): FLOPs and bytes moved of the nodes the rewrite matched, as
    they were, against the region's nodes now (graphfix.graph.cost, at the shapes graphfix's
    inference gave; no session). ``unknown_nodes``: nodes left out of both sums for a tensor of
    symbolic or unknown size. Read before any undo, as the diagram."""
    added = {id(n) for e in region.edits for n in e.added}
    before, seen = Cost(), set()
    for e in region.edits:  # a node an earlier edit of the region added was not in the original
        if id(e.node) in added or id(e.node) in seen:
            continue
        seen.add(id(e.node))
        op, inputs, outputs, attrs = e.saved
        before.add(gs_node_cost(op, inputs, outputs, attrs))
    after = nodes_cost(region.nodes)
    return {"flops_before": int(before.flops), "flops_after": int(after.flops), "bytes_before": int(before.bytes),
            "bytes_after": int(after.bytes), "unknown_nodes": before.unknown + after.unknown}


def original_names(model: onnx.ModelProto) -> set[str]:
    g = model.graph
    names = {i.name for i in g.input} | {t.name for t in g.initializer}
    for n in g.node:
        names.update(o for o in n.output if o)
    return names


def regions(edits: list[Edit], graph: gs.Graph, originals: set[str]) -> list[Region]:
    """Group live edits into independently checkable regions (union-find over shared new tensors)."""
    live = [e for e in edits if not e.undone]
    parent = list(range(len(live)))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    owner: dict[int, int] = {}
    edited: dict[int, int] = {}  # a node rewritten twice (in place, then replaced): one region, or
    for k, e in enumerate(live):  # undoing the first alone would revive its outputs beside the second's
        for n in e.added:
            owner[id(n)] = k
        first = edited.setdefault(id(e.node), k)
        if first != k:
            parent[find(k)] = find(first)
    for k, e in enumerate(live):
        if id(e.node) in owner and owner[id(e.node)] != k:
            parent[find(k)] = find(owner[id(e.node)])
        for n in e.added:
            for t in n.inputs:
                producer = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
                if producer is not None and id(producer) in owner:
                    parent[find(k)] = find(owner[id(producer)])
    groups: dict[int, list[Edit]] = {}
    for k, e in enumerate(live):
        groups.setdefault(find(k), []).append(e)

    alive = set().union(*(live_nodes(g) for g in all_graphs(graph)))
    out: list[Region] = []
    for key, group in enumerate(groups.values()):
        region = Region(key, group)
        members = {id(n): n for e in group for n in [*e.added, e.node] if id(n) in alive}
        region.nodes = _toposorted(list(members.values()))
        region.precision = precision.of_tensors(region.nodes, [t for e in group for t in [*e.saved[1], *e.saved[2]]])
        if any(e.in_subgraph for e in group):
            region.unchecked = "inside an If/Loop body (checked end to end)"
        produced = {t.name for n in region.nodes for t in n.outputs}
        for n in region.nodes:
            for t in n.inputs:
                if t.name and not isinstance(t, gs.Constant) and t.name not in produced and t.name not in originals:
                    region.unchecked = region.unchecked or f"reads {t.name!r}, which the original model does not compute"
        region.outputs = [t.name for n in region.nodes for t in n.outputs if t.name in originals]
        if not region.outputs and not region.unchecked:
            region.unchecked = "recomputes no tensor of the original model"
        out.append(region)
    return out


def _toposorted(nodes: list[gs.Node]) -> list[gs.Node]:
    """Kahn's order within a region (an edited node may read what a later-built node computes)."""
    producer = {id(t): n for n in nodes for t in n.outputs}
    deps = {id(n): {id(producer[id(t)]) for t in n.inputs if id(t) in producer} - {id(n)} for n in nodes}
    done: set[int] = set()
    order: list[gs.Node] = []
    pending = list(nodes)
    while pending:
        ready = [n for n in pending if deps[id(n)] <= done]
        if not ready:
            return order + pending
        for n in ready:
            done.add(id(n))
            order.append(n)
        pending = [n for n in pending if id(n) not in done]
    return order


def probe_model(original: onnx.ModelProto, regs: list[Region], extra: list[str] = ()) -> Assembled:
    """The original model plus a renamed copy of each checkable region, both values exposed, and the
    ``extra`` tensors (decisions' inputs and outputs); its weights are the original's protos (not a
    copy of them)."""
    probe = Assembled.of(original, to_edit=True)
    g = probe.stub.graph
    initializers = {t.name for t in original.graph.initializer}
    exposed = {o.name for o in g.output}

    def expose(name: str) -> None:
        if name not in exposed:
            g.output.append(helper.make_empty_tensor_value_info(name))
            exposed.add(name)

    for name in extra:
        expose(name)
    for r in regs:
        if r.unchecked:
            continue
        prefix = f"gf.probe{r.key}/"
        rename: dict[str, str] = {}
        for n in r.nodes:
            for t in n.outputs:
                rename[t.name] = prefix + t.name
            for t in n.inputs:
                if isinstance(t, gs.Constant) and t.name not in initializers and t.name not in rename:
                    rename[t.name] = prefix + t.name
                    probe.initializers.append(numpy_helper.from_array(np.asarray(t.values), prefix + t.name))
        for n in r.nodes:
            proto = export_node(n)
            proto.name = prefix + (proto.name or n.op)
            proto.input[:] = [rename.get(i, i) for i in proto.input]
            proto.output[:] = [rename.get(o, o) for o in proto.output]
            g.node.append(proto)
        for name in r.outputs:
            r.probes[name] = rename[name]
            expose(name)
            expose(rename[name])
    return probe
