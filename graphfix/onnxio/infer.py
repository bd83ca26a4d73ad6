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
    """Every value_info and output of the graph and its subgraphs, by name (the first wins)."""
    out: dict[str, onnx.ValueInfoProto] = {}
    _value_infos(model.graph, out)
    return out


def _value_infos(graph: onnx.GraphProto, out: dict[str, onnx.ValueInfoProto]) -> None:
    for vi in (*graph.value_info, *graph.output):
        out.setdefault(vi.name, vi)
    for n in graph.node:
        for a in n.attribute:
            for sub in [a.g] if a.HasField("g") else list(a.graphs):
                _value_infos(sub, out)


def infos_to_bytes(infos: dict[str, onnx.ValueInfoProto]) -> bytes:
    """:func:`value_infos`'s answer as a GraphProto's bytes (a fraction of the whole inferred model's)."""
    graph = onnx.GraphProto()
    graph.value_info.extend(infos.values())
    return graph.SerializeToString()


def infos_from_bytes(data: bytes) -> dict[str, onnx.ValueInfoProto]:
    graph = onnx.GraphProto()
    graph.ParseFromString(data)
    return {vi.name: vi for vi in graph.value_info}
