"""Mermaid diagrams of rewritten regions, bounded in size, and their parser for the HTML view.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.errors import cut, visible
from graphfix.verify.regions import Region

# ------------------------------------------------------------------------ report diagrams
_MAX_DIAGRAM_NODES = 24


#: Mermaid entity codes for the characters a label cannot hold literally: ``"`` ends the quoted
#: label, ``<``/``>`` read as HTML, ``&`` starts an HTML entity (``&lt;`` would show as ``<``), a
#: leading backtick starts a Markdown string, and ``#`` starts an entity (so it is escaped first).
_ESCAPES = {"#": "#35;", '"': "#quot;", "<": "#lt;", ">": "#gt;", "`": "#96;", "&": "#38;"}

#: Mermaid node shapes by what the node is: an op, a computed tensor, a constant.
_SHAPES = {"op": ("[", "]"), "tensor": ("([", "])"), "constant": ("[(", ")]")}


#: Characters of a label a diagram holds (a name can be 100,000 long; the JSON has it whole in
#: the region's node list); control characters are written as escapes, so no label breaks a line.
_MAX_LABEL = 160


def mermaid_node(node_id: str, text: str, shape: str = "op") -> str:
    """``id["text"]`` in the given shape, the text quoted and entity-escaped: tensor names hold
    ``/``, ``:``, ``[``, ``"`` and anything else, and one bad label fails the whole diagram."""
    opening, closing = _SHAPES[shape]
    quoted = "".join(_ESCAPES.get(c, c) for c in visible(cut(text, _MAX_LABEL)))
    return f'{node_id}{opening}"{quoted}"{closing}'


def _label(t: gs.Tensor) -> str:
    dtype = "?" if t.dtype is None else str(np.dtype(t.dtype)) if not isinstance(t.dtype, int) else str(t.dtype)
    shape = "?" if t.shape is None else "[" + ",".join(str(d) for d in t.shape) + "]"
    return f"{t.name}: {dtype}{shape}"


def _flow(prefix: str, nodes: list[tuple[str, list[gs.Tensor], list[gs.Tensor]]]) -> list[str]:
    lines, ids = [], {}

    def tid(t: gs.Tensor) -> str:
        if t.name not in ids:
            ids[t.name] = f"{prefix}t{len(ids)}"
            shape = "constant" if isinstance(t, gs.Constant) else "tensor"
            lines.append("    " + mermaid_node(ids[t.name], _label(t), shape))
        return ids[t.name]

    for k, (op, ins, outs) in enumerate(nodes[:_MAX_DIAGRAM_NODES]):
        nid = f"{prefix}n{k}"
        lines.append("    " + mermaid_node(nid, op))
        lines += [f"    {tid(t)} --> {nid}" for t in ins if t.name and not (isinstance(t, gs.Constant) and t.values.size > 16)]
        lines += [f"    {nid} --> {tid(t)}" for t in outs]
    if len(nodes) > _MAX_DIAGRAM_NODES:
        lines.append("    " + mermaid_node(f"{prefix}more", f"... {len(nodes) - _MAX_DIAGRAM_NODES} more nodes"))
    return lines


def diagram(region: Region) -> str:
    """A Mermaid before/after flowchart of one rewritten region (tensor names, dtypes, shapes)."""
    before = [(f"{e.saved[0]} {e.node.name}".strip(), e.saved[1], e.saved[2]) for e in region.edits]
    after = [(f"{n.op} {n.name}".strip(), list(n.inputs), list(n.outputs)) for n in region.nodes]
    lines = ["flowchart LR", "  subgraph " + mermaid_node("before", "before"), *_flow("b", before), "  end",
             "  subgraph " + mermaid_node("after", "after"), *_flow("a", after), "  end"]
    return "\n".join(lines)


_UNESCAPES = {v: k for k, v in _ESCAPES.items()}
_NODE_LINE = re.compile(r'^\s*(\w+)(\(\[|\[\(|\[)"(.*)"(\]\)|\)\]|\])$')
_EDGE_LINE = re.compile(r"^\s*(\w+) --> (\w+)$")
_SUBGRAPH_LINE = re.compile(r"^\s*subgraph (\w+)")
_KINDS = {"[": "op", "([": "tensor", "[(": "constant"}


@dataclass
class DrawnGraph:
    """One side (before/after) of a :func:`diagram`: nodes as (kind, label) by id, in the order
    written, and the edges; what the HTML report lays out as SVG."""

    nodes: dict[str, tuple[str, str]] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)


def diagram_graphs(text: str) -> dict[str, DrawnGraph]:
    """The inverse of :func:`diagram`: its subgraphs by name (``before``/``after``), labels
    unescaped. Read from the diagram text so that a JSON report alone can be drawn again."""
    sides: dict[str, DrawnGraph] = {}
    side = sides.setdefault("", DrawnGraph())
    for line in text.splitlines():
        if m := _SUBGRAPH_LINE.match(line):
            side = sides.setdefault(m.group(1), DrawnGraph())
        elif m := _EDGE_LINE.match(line):
            side.edges.append((m.group(1), m.group(2)))
        elif m := _NODE_LINE.match(line):
            label = re.sub(r"#(quot|lt|gt|96|35|38);", lambda e: _UNESCAPES[e.group(0)], m.group(3))
            side.nodes[m.group(1)] = (_KINDS[m.group(2)], label)
    return {k: v for k, v in sides.items() if v.nodes}
