"""One node as a NodeProto: onnx-graphsurgeon's export, plus the attributes it cannot type.

onnx-graphsurgeon imports an empty list attribute (``axes=[]``, or an out-of-spec ``axis=[]``)
as ``[]`` and exports through ``onnx.helper.make_attribute``, which cannot tell an empty INTS from
an empty FLOATS ("Could not infer attribute type from empty iterator": exit 3 on any rewritten
node with one, found by the fuzz). graphfix's importer keeps its type (:class:`TypedEmpty`), and
it is written back empty of that type; one a pass made empty gets the list type the op's schema
declares, INTS where it declares none.
"""

from __future__ import annotations

import functools

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

from graphfix.graph.order import stable_order

_A = onnx.AttributeProto
_LISTS = frozenset({_A.FLOATS, _A.INTS, _A.STRINGS, _A.TENSORS, _A.GRAPHS, _A.SPARSE_TENSORS, _A.TYPE_PROTOS})


class TypedEmpty(list):
    """An empty list attribute as imported, with its AttributeProto type (FLOATS, INTS, STRINGS:
    onnx's checker accepts some of them where the op declares a single value, and not others)."""

    __slots__ = ("kind",)

    def __init__(self, kind: int) -> None:
        super().__init__()
        self.kind = kind


def export_node(node: gs.Node) -> onnx.NodeProto:
    """``node`` as onnx-graphsurgeon exports it, its empty list attributes typed (see above), its
    bodies in topological order (a pass appends what it adds to a body; onnxruntime refuses a body
    whose node reads a tensor defined after it: "Nodes in a graph must be topologically sorted")."""
    if not any(_empty(v) for v in node.attrs.values()):
        proto = OnnxExporter.export_node(node)
    else:
        proto = onnx.helper.make_node(node.op, inputs=[t.name for t in node.inputs],
                                      outputs=[t.name for t in node.outputs], name=node.name, domain=node.domain)
        for key, value in node.attrs.items():
            proto.attribute.extend(export_attribute(node, key, value))
    for a in proto.attribute:
        for sub in [a.g] if a.type == _A.GRAPH else list(a.graphs):
            sort_graph(sub)
    return proto


def sort_graph(g: onnx.GraphProto) -> None:
    """``g``'s nodes (and its bodies', first) in topological order, in place, the stored order kept
    where it holds; a name ``g`` does not produce is read from an enclosing scope."""
    reads: list[set[str]] = []
    for n in g.node:
        names = set(n.input)
        for a in n.attribute:
            for sub in [a.g] if a.type == _A.GRAPH else list(a.graphs):
                sort_graph(sub)
                names |= _names_read(sub)
        reads.append(names)
    producer = {o: k for k, n in enumerate(g.node) for o in n.output if o}
    deps = [{producer[i] for i in names if i in producer} - {k} for k, names in enumerate(reads)]
    if all(d < k for k, ds in enumerate(deps) for d in ds):
        return
    order = stable_order(deps)
    placed = set(order)
    order += [k for k in range(len(deps)) if k not in placed]  # a cycle: left as stored, for onnxruntime to name
    nodes = [g.node[k] for k in order]
    del g.node[:]
    g.node.extend(nodes)


def _names_read(g: onnx.GraphProto) -> set[str]:
    """Every name ``g``'s nodes (and their bodies') read: a superset of what it reads from outside."""
    names: set[str] = {o.name for o in g.output}
    for n in g.node:
        names.update(n.input)
        for a in n.attribute:
            for sub in [a.g] if a.type == _A.GRAPH else list(a.graphs):
                names |= _names_read(sub)
    return names


def export_attribute(node: gs.Node, key: str, value: object) -> list[onnx.AttributeProto]:
    """One attribute of ``node`` as onnx-graphsurgeon exports it, or, an empty list, typed (see above)."""
    if _empty(value):
        kind = value.kind if isinstance(value, TypedEmpty) else _list_type(node.op, node.domain or "", key)
        return [onnx.AttributeProto(name=key, type=kind)]
    return OnnxExporter.export_attributes({key: value})


def _empty(value: object) -> bool:
    return isinstance(value, list | tuple) and not value


@functools.cache
def _list_type(op: str, domain: str, name: str) -> int:
    try:
        declared = onnx.defs.get_schema(op, domain).attributes.get(name)
    except onnx.defs.SchemaError:
        declared = None
    kind = int(declared.type) if declared is not None else _A.INTS
    return kind if kind in _LISTS else _A.INTS
