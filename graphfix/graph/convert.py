"""ModelProto <-> onnx-graphsurgeon Graph, with fresh shape inference and the model's metadata kept."""

from __future__ import annotations

from collections.abc import Iterator

import onnx
import onnx_graphsurgeon as gs

from graphfix.model_io import default_opset


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """Shape/type inference from scratch: stale value_info from an earlier rewrite could conflict."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    del work.graph.value_info[:]
    try:
        return onnx.shape_inference.infer_shapes(work, data_prop=True)
    except Exception:  # noqa: BLE001 - custom ops or >2 GiB: rewrite with what we know
        return work


def all_graphs(graph: gs.Graph) -> Iterator[gs.Graph]:
    """The graph, then every subgraph (If branches, Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.nodes:
        for value in node.attrs.values():
            for sub in value if isinstance(value, list) else [value]:
                if isinstance(sub, gs.Graph):
                    yield from all_graphs(sub)


def to_graph(model: onnx.ModelProto) -> gs.Graph:
    graph = gs.import_onnx(infer(model))
    graph.opset = default_opset(model)
    return graph


def to_model(graph: gs.Graph, template: onnx.ModelProto) -> onnx.ModelProto:
    """Export and restore what export drops: IR version, all opset imports, producer, metadata."""
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    model = gs.export_onnx(graph, do_type_check=False)
    model.ir_version = template.ir_version
    if model.ir_version < 4 and model.graph.initializer:
        model.ir_version = 4  # IR < 4 wants every initializer listed as a graph input; new constants are not
    del model.opset_import[:]
    model.opset_import.extend(template.opset_import)
    model.producer_name = template.producer_name
    model.producer_version = template.producer_version
    model.domain = template.domain
    model.model_version = template.model_version
    model.doc_string = template.doc_string
    del model.metadata_props[:]
    model.metadata_props.extend(template.metadata_props)
    if not model.functions and template.functions:
        model.functions.extend(template.functions)
    return model
