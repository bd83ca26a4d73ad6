"""ModelProto <-> onnx-graphsurgeon Graph, with fresh shape inference and the model's metadata kept."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from itertools import islice

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter, dtype_to_onnx

from graphfix.graph.build import stored
from graphfix.graph.edits import bodies, live_nodes, outer_reads
from graphfix.graph.importer import all_graphs, fingerprint, import_typed
from graphfix.graph.infer import complete
from graphfix.graph.node_export import export_node
from graphfix.graph.order import stable_order
from graphfix.graph.scopes import BodyExporter, has_bodies
from graphfix.onnxio.collector import collector_off
from graphfix.onnxio.infer import inferred, value_infos
from graphfix.onnxio.ir import default_opset
from graphfix.onnxio.proto import Assembled, copy_fields, weightless


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """Shape/type inference from scratch on the weightless model (no stale value_info)."""
    work = weightless(model)
    found = inferred(work)
    return work if found is None else found


def _computed_outputs(graph: gs.Graph) -> None:
    """A graph output that folding made a constant (``--set-input``: optimum's with-past branch
    returns placeholders; ``--fix-shapes``: an output computed from shapes) is written by a
    Constant node: exported as is it was dropped, and an initializer is no graph output to onnx's
    checker ("Graph output ... is not an output of any node") nor a layer output to TensorRT."""
    for k, t in enumerate(graph.outputs):
        if isinstance(t, gs.Constant):
            taken = graph.tensors()
            value = gs.Variable(t.name, dtype=t.dtype, shape=list(t.shape))
            name, n = f"{t.name}_value", 1
            while name in taken:
                n += 1
                name = f"{t.name}_value{n}"
            t.name = name
            graph.nodes.append(gs.Node("Constant", name=f"{value.name}_constant", attrs={"value": t}, outputs=[value]))
            graph.outputs[k] = value


def _prune_and_sort(g: gs.Graph) -> None:
    """Drop the nodes the outputs do not need (replaced ones) and put the rest in topological
    order, the original order kept where it already holds: linear, where onnx-graphsurgeon's
    cleanup + toposort took most of an export's time on big graphs."""
    live = live_nodes(g)
    nodes = [n for n in g.nodes if id(n) in live]
    if len(nodes) != len(g.nodes):  # remembered: undoing a rewrite revives the node it replaced
        g.__dict__.setdefault("gf_pruned", {}).update((id(n), n) for n in g.nodes if id(n) not in live)
    if _in_order(nodes):  # what the sort below would return (it keeps an order that holds)
        g.nodes = nodes
        return
    index = {id(n): k for k, n in enumerate(nodes)}
    deps = []
    for k, n in enumerate(nodes):
        reads = [t for t in n.inputs if t.name]
        for sub in n.subgraphs():
            reads.extend(outer_reads(sub))
        deps.append({index[id(p)] for t in reads for p in t.inputs if id(p) in index} - {k})
    order = stable_order(deps)
    if len(order) != len(nodes):  # a cycle: leave it to onnx-graphsurgeon (and its error)
        g.cleanup(remove_unused_graph_inputs=False, recurse_subgraphs=False).toposort(recurse_subgraphs=False)
        return
    g.nodes = [nodes[k] for k in order]


def _in_order(nodes: list[gs.Node]) -> bool:
    """Every node after the producers of what it reads (bodies' reads are left to the sort)."""
    done: set[int] = set()
    for n in nodes:
        for t in n.inputs:
            for p in t.inputs:
                if id(p) not in done:
                    return False
        if n.attrs and bodies(n):
            return False
        done.add(id(n))
    return True


def to_graph(model: onnx.ModelProto, freeze: bool = False,
             infos: Callable[[], dict[str, onnx.ValueInfoProto]] | None = None) -> gs.Graph:
    """The model as one typed onnx-graphsurgeon graph. No collections run during the import: it
    creates ~10 objects per node and frees none, so each collection is pure cost, and they grow
    with the heap (a 100k-node import took 5x longer with the collector on).

    ``freeze``: move everything allocated so far to the collector's permanent generation
    (``gc.freeze()``; the caller unfreezes) before the collector is back on. Else the first
    allocation after the import scans all of its ~10 objects per node as the youngest generation
    (0.7 s of a 100k-node import, bench/scale.py) only to find every one of them alive.

    ``infos``: the value_infos shape inference found, asked once the nodes are built (default:
    :func:`infer`'s, here and then)."""
    with collector_off(freeze):
        graph, sources = import_typed(model, infos or (lambda: value_infos(infer(model))))
        graph.opset = default_opset(model)
        complete(graph)  # ranks and types where onnx's inference gave up (NonZero -> GatherND at opset 11)
    # What each imported node looked like, and its proto: export reuses the proto of every node
    # no pass touched (onnx-graphsurgeon re-creates all of them, most of an export's time).
    graph.gf_source = (model, sources)
    return graph


def to_model(graph: gs.Graph, template: onnx.ModelProto) -> onnx.ModelProto:
    """Export and restore what export drops: IR version, all opset imports, producer, metadata."""
    exported = to_parts(graph, template)
    return exported.proto() if isinstance(exported, Assembled) else exported


def to_parts(graph: gs.Graph, template: onnx.ModelProto) -> onnx.ModelProto | Assembled:
    """:func:`to_model`, with the template's unchanged initializers not copied into a new model
    (an :class:`~graphfix.onnxio.load.Assembled` model) when the graph came from ``template``.
    No collections run during it: it makes a proto per new node and tensor and frees little."""
    with collector_off():
        return _to_parts(graph, template)


def _to_parts(graph: gs.Graph, template: onnx.ModelProto) -> onnx.ModelProto | Assembled:
    _computed_outputs(graph)
    for g in list(all_graphs(graph)):
        _prune_and_sort(g)
    source = stored(graph, "gf_source")
    if source is not None and source[0] is template and _same_signature(graph, template) and not template.graph.sparse_initializer:
        parts = _export_reusing(graph, template, source[1])
        parts.stub.ir_version = template.ir_version
        if parts.stub.ir_version < 4 and parts.initializers:
            parts.stub.ir_version = 4  # IR < 4 wants every initializer listed as a graph input; new constants are not
        return parts
    model = gs.export_onnx(graph, do_type_check=False)
    _rescope_bodies(graph, model)
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
    model.ir_version = template.ir_version
    if model.ir_version < 4 and model.graph.initializer:
        model.ir_version = 4
    return model


def _rescope_bodies(graph: gs.Graph, model: onnx.ModelProto) -> None:
    """onnx-graphsurgeon's export of the bodies replaced by :class:`BodyExporter`'s, and the main
    graph's constants that only bodies read written in the main graph."""
    declared = stored(graph, "gf_declared") or ()
    scoped = _body_exporter(graph, declared)
    if scoped is None:
        return
    names = {t.name for t in model.graph.initializer}
    for proto, n in zip(model.graph.node, graph.nodes, strict=True):
        if has_bodies(n):
            proto.Clear()
            for t in scoped.node_into(proto, n):
                if t.name not in names:
                    names.add(t.name)
                    model.graph.initializer.append(_export_constant(t))


def _same_signature(graph: gs.Graph, template: onnx.ModelProto) -> bool:
    return [t.name for t in graph.inputs] == [i.name for i in template.graph.input] and \
        [t.name for t in graph.outputs] == [o.name for o in template.graph.output]


def _export_reusing(graph: gs.Graph, template: onnx.ModelProto, protos: dict[int, tuple]) -> Assembled:
    """The template's metadata, inputs and outputs; its node and initializer protos where the node
    or tensor is unchanged; onnx-graphsurgeon's export only for new or edited nodes."""
    model = onnx.ModelProto()
    copy_fields(template, model, skip="graph")
    g, tg = model.graph, template.graph
    g.name, g.doc_string = tg.name, tg.doc_string
    g.input.extend(tg.input)
    g.output.extend(tg.output)
    originals = {t.name: t for t in tg.initializer}
    initializers: list[onnx.TensorProto] = []
    written: set[str] = set()
    scoped = _body_exporter(graph, originals)
    for n in graph.nodes:
        known = protos.get(id(n))
        reads = n.inputs
        if known is not None and not known[2] and known[1] == fingerprint(n):
            g.node.append(known[0])
        elif scoped is not None and has_bodies(n):
            reads = [*scoped.node_into(g.node.add(), n), *n.inputs]  # and the constants its bodies need here
        else:
            g.node.append(export_node(n))
        for t in reads:  # no call per constant: this loop runs for every input of a 100k-node graph
            if isinstance(t, gs.Constant) and t.name not in written:
                written.add(t.name)
                initializers.append(originals[t.name] if t.name in originals and _unchanged(t, originals[t.name])
                                    else _export_constant(t))
    for t in [*graph.inputs, *graph.outputs]:  # IR < 4 lists initializers as inputs too; an output may be one
        if t.name in originals and t.name not in written:
            written.add(t.name)
            initializers.append(originals[t.name])
    return Assembled(model, initializers)


def _body_exporter(graph: gs.Graph, declared: Collection[str]) -> BodyExporter | None:
    """The exporter of ``graph``'s bodies (None without any): each of its constants in the scope
    that declared it (graphfix.graph.scopes)."""
    if next(islice(all_graphs(graph), 1, None), None) is None:
        return None
    visible = {id(t) for n in graph.nodes for t in n.inputs if isinstance(t, gs.Constant)}
    return BodyExporter(graph, declared, visible, _export_constant)


def _export_constant(t: gs.Constant) -> onnx.TensorProto:
    """``OnnxExporter.export_tensor_proto(t)``, with each numpy dtype's ONNX type looked up once:
    onnx-graphsurgeon's ``dtype_to_onnx`` builds its ml_dtypes table on every call (2.5 us, twice
    a constant; 0.13 s of exporting fold-clip's 25,000 new bounds on bench/scale.py)."""
    values = t.__dict__.get("_values")
    if not isinstance(values, np.ndarray) or not isinstance(t.dtype, np.dtype) or t.export_dtype != t.dtype:
        return OnnxExporter.export_tensor_proto(t)  # its own tensor (lazy, sparse), or a conversion on export
    proto = onnx.helper.make_tensor(name=t.name, data_type=_onnx_type(t.dtype), dims=t.shape, vals=values.tobytes(), raw=True)
    if t.data_location is not None:
        proto.data_location = t.data_location
    return proto


@functools.cache
def _onnx_type(dtype: np.dtype) -> int:
    return dtype_to_onnx(dtype)


def _unchanged(t: gs.Constant, original: onnx.TensorProto) -> bool:
    """The constant still holds the template's tensor (not loaded and replaced by a pass)."""
    values = getattr(t, "_values", None)
    return getattr(values, "tensor", None) is original
