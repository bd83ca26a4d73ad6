"""onnx's shape inference, from scratch, on a weightless model (a ModelProto or its bytes).

One function for both places it runs: in-process (:func:`graphfix.graph.convert.infer`) and in
graphfix's worker, beside the import of a big graph (:mod:`graphfix.pipeline.load_checks`).
"""

from __future__ import annotations

import onnx


def inferred(work: onnx.ModelProto | bytes) -> onnx.ModelProto | None:
    """``work`` with every value_info onnx can infer (data propagation on: shape arithmetic is
    followed); None when inference gives up (custom ops, malformed graphs)."""
    try:
        return onnx.shape_inference.infer_shapes(work, data_prop=True)
    except Exception:  # noqa: BLE001 - custom ops or malformed: the caller rewrites with what it knows
        return None


def value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every value_info and output of the graph (by name, the first wins) and of its subgraphs (by
    :func:`scoped_name`: sibling bodies reuse names for other tensors, as the two decoders of an
    optimum merged model do, and a flat dict typed one branch's tensors with the other's types)."""
    out: dict[str, onnx.ValueInfoProto] = {}
    _value_infos(model.graph, out, "")
    return out


#: Separates a body's scope from a name in :func:`scoped_name` (no exporter writes it in a name).
SCOPE_MARK = "\x1f"


def body_scope(scope: str, node_index: int, attribute: str, index: int | None = None) -> str:
    """The scope of the body in attribute ``attribute`` (graph ``index`` of a list) of node
    ``node_index`` of the graph whose scope is ``scope`` ("" for the main graph)."""
    here = f"{node_index}.{attribute}" if index is None else f"{node_index}.{attribute}.{index}"
    return f"{scope}/{here}" if scope else here


def scoped_name(scope: str, name: str) -> str:
    """The key of a body's tensor in :func:`value_infos` (the main graph's names are their own)."""
    return f"{SCOPE_MARK}{scope}{SCOPE_MARK}{name}" if scope else name


def _value_infos(graph: onnx.GraphProto, out: dict[str, onnx.ValueInfoProto], scope: str) -> None:
    if not scope:  # the main graph (a 100k-node export's list): its names as they are
        for vi in (*graph.value_info, *graph.output):
            out.setdefault(vi.name, vi)
    for vi in (*graph.value_info, *graph.output) if scope else ():
        key = scoped_name(scope, vi.name)
        if key not in out:
            out[key] = _renamed(vi, key)
    for k, n in enumerate(graph.node):
        for a in n.attribute:
            if a.HasField("g"):
                _value_infos(a.g, out, body_scope(scope, k, a.name))
            for j, sub in enumerate(a.graphs):
                _value_infos(sub, out, body_scope(scope, k, a.name, j))


def _renamed(vi: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    """A copy under its scoped name (the name travels with it through :func:`infos_to_bytes`)."""
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(vi)
    copy.name = name
    return copy


def infos_to_bytes(infos: dict[str, onnx.ValueInfoProto]) -> bytes:
    """:func:`value_infos`'s answer as a GraphProto's bytes (a fraction of the whole inferred model's)."""
    graph = onnx.GraphProto()
    graph.value_info.extend(infos.values())
    return graph.SerializeToString()


def infos_from_bytes(data: bytes) -> dict[str, onnx.ValueInfoProto]:
    graph = onnx.GraphProto()
    graph.ParseFromString(data)
    return {vi.name: vi for vi in graph.value_info}
