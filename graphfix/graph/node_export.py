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
    """``node`` as onnx-graphsurgeon exports it, its empty list attributes typed (see above)."""
    if not any(_empty(v) for v in node.attrs.values()):
        return OnnxExporter.export_node(node)
    proto = onnx.helper.make_node(node.op, inputs=[t.name for t in node.inputs], outputs=[t.name for t in node.outputs],
                                  name=node.name, domain=node.domain)
    for key, value in node.attrs.items():
        proto.attribute.extend(export_attribute(node, key, value))
    return proto


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
