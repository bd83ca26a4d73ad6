"""Export of If/Loop/Scan bodies: each initializer in the scope that declared it, no types for names
a body only reads.

onnx-graphsurgeon's export of a body writes every constant the body reads as the body's own
initializer and a value_info for every tensor it reads: a merged decoder's weights, declared once
in the main graph and read by both branches, came out copied into each branch and gone from the
main graph, and each branch re-declared the types of the outer tensors it reads. Here a constant
read in a body is written by the innermost enclosing graph that declared it at import
(``gf_declared``, :func:`graphfix.graph.importer.gs_import`), a constant a pass made by the
graph that reads it (once, by the outermost such graph on the path), and a body lists its inputs
and outputs only: like the main graph's export, which writes no value_info, it leaves the types
of its intermediate tensors to shape inference, which cannot then disagree with a stale one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter
from onnx_graphsurgeon.ir.tensor import SparseValues

from graphfix.graph.build import stored
from graphfix.graph.node_export import export_attribute, export_node


def has_bodies(node: gs.Node) -> bool:
    if not node.attrs:
        return False
    for value in node.attrs.values():
        if isinstance(value, gs.Graph) or (isinstance(value, list) and any(isinstance(v, gs.Graph) for v in value)):
            return True
    return False


class BodyExporter:
    """Exports the nodes with bodies of one main graph. ``declared``: the names of the main
    graph's initializers; ``visible``: ids of the constants the main graph writes itself (every
    one its own nodes read), which no body writes again; ``export_constant``: a constant's
    TensorProto."""

    def __init__(self, root: gs.Graph, declared: Collection[str], visible: set[int],
                 export_constant: Callable[[gs.Constant], onnx.TensorProto]) -> None:
        self.root = root
        self.declared = declared
        self.visible = visible
        self.export_constant = export_constant

    def node_into(self, proto: onnx.NodeProto, node: gs.Node) -> list[gs.Constant]:
        """Fill ``proto`` (an empty NodeProto, in place: a body is never copied) with ``node`` and
        its bodies; returns the constants its bodies read that the main graph must write."""
        return self._node(proto, node, [self.root])

    def _node(self, proto: onnx.NodeProto, node: gs.Node, path: list[gs.Graph]) -> list[gs.Constant]:
        proto.op_type = node.op
        proto.input.extend([t.name for t in node.inputs])
        proto.output.extend([t.name for t in node.outputs])
        if node.name:
            proto.name = node.name
        if node.domain:
            proto.domain = node.domain
        needs: list[gs.Constant] = []
        for key, value in node.attrs.items():
            if isinstance(value, gs.Graph):
                attr = proto.attribute.add()
                attr.name, attr.type = key, onnx.AttributeProto.GRAPH
                needs.extend(self._body(attr.g, value, path))
            elif isinstance(value, list) and value and all(isinstance(v, gs.Graph) for v in value):
                attr = proto.attribute.add()
                attr.name, attr.type = key, onnx.AttributeProto.GRAPHS
                for v in value:
                    needs.extend(self._body(attr.graphs.add(), v, path))
            else:
                proto.attribute.extend(export_attribute(node, key, value))
        return needs

    def _body(self, proto: onnx.GraphProto, body: gs.Graph, path: list[gs.Graph]) -> list[gs.Constant]:
        """Write ``body`` into ``proto``; returns the constants an enclosing graph must write."""
        here = [*path, body]
        visible = self.visible
        writes: dict[int, gs.Constant] = {}
        needs: dict[int, gs.Constant] = {}
        for n in body.nodes:
            for t in n.inputs:
                if isinstance(t, gs.Constant) and id(t) not in visible:
                    self._place(t, here, writes, needs)
        for t in body.outputs:  # a branch returning its own initializer (a placeholder): no node reads it
            if isinstance(t, gs.Constant) and id(t) not in visible:
                self._place(t, here, writes, needs)
        mine = [k for k in writes if k not in visible]
        visible.update(mine)
        for n in body.nodes:
            if has_bodies(n):
                for t in self._node(proto.node.add(), n, here):
                    if id(t) not in visible:
                        self._place(t, here, writes, needs)
                        if id(t) in writes:
                            visible.add(id(t))
                            mine.append(id(t))
            else:
                proto.node.append(export_node(n))
        visible.difference_update(mine)
        if body.name:
            proto.name = body.name
        if body.doc_string:
            proto.doc_string = body.doc_string
        proto.input.extend([OnnxExporter.export_value_info_proto(t, False) for t in body.inputs])
        proto.output.extend([OnnxExporter.export_value_info_proto(t, False) for t in body.outputs])
        for t in writes.values():
            if isinstance(t.__dict__.get("_values"), SparseValues):
                proto.sparse_initializer.append(OnnxExporter.export_sparse_tensor_proto(t))
            else:
                proto.initializer.append(self.export_constant(t))
        return list(needs.values())

    def _place(self, t: gs.Constant, here: list[gs.Graph], writes: dict, needs: dict) -> None:
        """Written here (declared here, or made by a pass) or by the enclosing graph declaring it."""
        if id(t) in writes or id(t) in needs:
            return
        for g in reversed(here):
            if t.name in (self.declared if g is self.root else stored(g, "gf_declared") or ()):
                (writes if g is here[-1] else needs)[id(t)] = t
                return
        writes[id(t)] = t

