"""ONNX -> onnx-graphsurgeon import in one linear walk, typed from shape inference as it goes.

Why: on a 100k-node export, ``gs.import_onnx`` followed by a second walk applying the inferred
types was a third of ``graphfix --no-verify`` (issue 8: at most 4x ``onnx.load`` + ``onnx.save``).
Most of that is onnx-graphsurgeon's per-object bookkeeping: a closure per attribute, a log call
per tensor, ``SynchronizedList.extend`` re-walking every list it was just given.

:func:`import_typed` builds exactly the objects ``gs.import_onnx`` builds (``Variable``,
``Constant`` over ``LazyValues``, ``Node`` with synchronized input/output lists, the same
``Graph``) and gives each tensor the dtype and shape inference found. Graphs it does not cover
(subgraphs, functions, sparse initializers, attribute references or attribute types
onnx-graphsurgeon skips) take onnx-graphsurgeon's importer and then the typing walk, as before.
``tests/graph/test_importer.py`` compares both importers on every fixture.
"""

from __future__ import annotations

import contextlib
import functools
from collections import ChainMap
from collections.abc import Callable, Iterator

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.importers import onnx_importer as gsi
from onnx_graphsurgeon.ir.tensor import LazyValues
from onnx_graphsurgeon.util.misc import SynchronizedList

from graphfix.graph.node_export import TypedEmpty
from graphfix.graph.state import _active, _generation
from graphfix.onnxio.infer import body_scope, scoped_name, value_infos
from graphfix.onnxio.shadow import unshadowed

_A = onnx.AttributeProto


class _NotCovered(Exception):
    """The graph needs onnx-graphsurgeon's own importer."""


#: id(node) -> (its NodeProto, its fingerprint at import, whether it has bodies): the export
#: reuses the proto of every node whose fingerprint still matches.
Sources = dict[int, tuple[onnx.NodeProto, tuple, bool]]


#: The inferred value_infos by name, or how to get them once the nodes are built.
Infos = dict[str, onnx.ValueInfoProto] | Callable[[], dict[str, onnx.ValueInfoProto]]


def import_typed(model: onnx.ModelProto, inferred: onnx.ModelProto | Callable[[], dict[str, onnx.ValueInfoProto]]) \
        -> tuple[gs.Graph, Sources]:
    """The model as an onnx-graphsurgeon graph, tensors typed from ``inferred`` (the model after
    shape inference), and where each node came from. ``inferred`` may be a callable giving its
    value_infos (:func:`~graphfix.onnxio.infer.value_infos`), asked once, after the nodes are
    built: inference can run elsewhere meanwhile (the worker, on a big graph:
    graphfix.pipeline.load_checks)."""
    infos: Infos = inferred if callable(inferred) else value_infos(inferred)
    if not model.functions and not model.graph.sparse_initializer:
        try:
            fast = _Import(model, infos)
            return fast.graph(), fast.sources
        except _NotCovered:
            pass
    model = unshadowed(model)  # a body initializer named like an outer tensor: onnx-graphsurgeon would bind the outer one
    graph = gs_import(model, infos)
    return graph, {id(n): (p, fingerprint(n), any(True for _ in n.subgraphs()))
                   for n, p in zip(graph.nodes, model.graph.node, strict=False)}


def fingerprint(n: gs.Node) -> tuple:
    """What a node is made of: a pass that edits it changes this."""
    return (n.op, n.domain, tuple([t.name for t in n.inputs]), tuple([t.name for t in n.outputs]),
            tuple([(k, id(v)) for k, v in n.attrs.items()]))


def gs_import(model: onnx.ModelProto, infos: Infos) -> gs.Graph:
    """onnx-graphsurgeon's importer, then the inferred types: any graph, a walk more. Each body's
    own tensors (its inputs and what its nodes compute) are typed from that body's value_infos
    (:func:`~graphfix.onnxio.infer.scoped_name`), the tensors it reads from outside by the graph
    that defines them; each graph remembers the initializers it declared (``gf_declared``), so
    that the export writes every one in its own scope (graphfix.graph.scopes); a body is marked
    ``gf_body`` (its live sweep, graphfix.graph.edits, stays inside it)."""
    with _scopes_by_reference():
        graph = gs.import_onnx(model)
    infos = _resolved(infos)
    for name, t in graph.tensors().items():
        vi = infos.get(name)
        if vi is not None and isinstance(t, gs.Variable):
            _retype(t, vi)
    graph.gf_declared = frozenset(t.name for t in model.graph.initializer)
    for body, proto, scope in _bodies_with_scopes(graph, model.graph, ""):
        body.gf_declared = frozenset(t.name for t in proto.initializer)
        body.gf_body = True
        for t in _defined(body):
            vi = infos.get(scoped_name(scope, t.name))
            if vi is not None and isinstance(t, gs.Variable):
                _retype(t, vi)
    return graph


class _Scope(ChainMap):
    """The tensors a body sees by name: its own graph's map, then each enclosing graph's, held by
    reference. onnx-graphsurgeon (0.6.1) copies every enclosing map into a new dict for each body
    (``misc.combine_dicts``) and copies that again on entering it (``copy.copy``), so a graph of
    many bodies cost the size of all that encloses each one: 40k nodes in 4,440 bodies imported
    in 38 s (bench/subgraph_scale.py). The importer only reads the outer maps ("Outer graph
    tensors, read-only") and imports a body before its graph's next node, so a reference sees
    what the copy held."""

    def __copy__(self) -> _Scope:
        return self


def _scope(outer: dict, own: dict) -> _Scope:
    """``misc.combine_dicts(tensor_map, subgraph_tensor_map)`` as the importer calls it for a body."""
    return _Scope(own, *(outer.maps if isinstance(outer, _Scope) else [outer]))


@contextlib.contextmanager
def _scopes_by_reference() -> Iterator[None]:
    """onnx-graphsurgeon's importer with :class:`_Scope` for the maps it hands a body (its only
    use of ``combine_dicts``); restored after."""
    misc = gsi.misc
    combine = misc.combine_dicts
    misc.combine_dicts = _scope
    try:
        yield
    finally:
        misc.combine_dicts = combine


def _bodies_with_scopes(graph: gs.Graph, proto: onnx.GraphProto, scope: str) \
        -> Iterator[tuple[gs.Graph, onnx.GraphProto, str]]:
    """Every body of ``graph`` (imported from ``proto``, node for node), nested ones included,
    with its proto and its scope (:func:`~graphfix.onnxio.infer.body_scope`)."""
    for k, (node, p) in enumerate(zip(graph.nodes, proto.node, strict=False)):
        for a in p.attribute:
            value = node.attrs.get(a.name)
            if a.HasField("g") and isinstance(value, gs.Graph):
                found = [(value, a.g, body_scope(scope, k, a.name))]
            elif a.graphs and isinstance(value, list):
                found = [(v, sub, body_scope(scope, k, a.name, j))
                         for j, (v, sub) in enumerate(zip(value, a.graphs, strict=False)) if isinstance(v, gs.Graph)]
            else:
                continue
            for body, sub, here in found:
                yield body, sub, here
                yield from _bodies_with_scopes(body, sub, here)


def _defined(body: gs.Graph) -> Iterator[gs.Tensor]:
    """The tensors a body defines: its inputs and its nodes' outputs."""
    yield from body.inputs
    for n in body.nodes:
        yield from n.outputs


def _resolved(infos: Infos) -> dict[str, onnx.ValueInfoProto]:
    return infos() if callable(infos) else infos


def all_graphs(graph: gs.Graph) -> Iterator[gs.Graph]:
    """The graph, then every subgraph (If branches, Loop/Scan bodies), depth first.

    A graph found to have no bodies is remembered as such for its state (the edit generation
    and node count, as :func:`graphfix.graph.edits.live_nodes`): the pipeline asks a dozen times
    per run, and each walk over a 100k-node export's attributes took 40 ms."""

    yield graph
    key = (_generation[0], len(graph.nodes))  # after the caller had the graph: it may have edited it
    if graph.__dict__.get("gf_flat") == key and not _active:
        return
    flat = True
    for node in graph.nodes:
        if node.attrs:
            for value in node.attrs.values():
                if isinstance(value, gs.Graph):
                    flat = False
                    yield from all_graphs(value)
                elif isinstance(value, list):
                    for sub in value:
                        if isinstance(sub, gs.Graph):
                            flat = False
                            yield from all_graphs(sub)
    if flat and not _active and key == (_generation[0], len(graph.nodes)):
        graph.__dict__["gf_flat"] = key


def copy_body(body: gs.Graph) -> gs.Graph:
    """A copy of an If branch or a Loop/Scan body (its nested bodies too) that keeps every tensor
    it reads from an enclosing graph as the same object: what a pass inlines, or installs in place
    of a body whose inputs/outputs it changes (the pipeline's contract holds a body that is still
    there to its signature)."""
    defined: set[int] = set()
    read: dict[str, gs.Tensor] = {}
    for g in all_graphs(body):
        defined.update(id(t) for t in g.inputs)
        for n in g.nodes:
            defined.update(id(o) for o in n.outputs)
            read.update((i.name, i) for i in n.inputs if i.name)
        read.update((o.name, o) for o in g.outputs if o.name)
    return body.copy(tensor_map={name: t for name, t in read.items() if id(t) not in defined})


def enclosing(root: gs.Graph) -> dict[int, list[str]]:
    """Per graph (by id), the names of the nodes that hold it, outermost first (the root: none):
    where a node inside an If branch or a Loop/Scan body is."""
    where: dict[int, list[str]] = {id(root): []}
    stack = [(root, [])]
    while stack:
        g, path = stack.pop()
        for node in g.nodes:
            for value in node.attrs.values():
                for sub in value if isinstance(value, list) else [value]:
                    if isinstance(sub, gs.Graph):
                        where[id(sub)] = [*path, node.name]
                        stack.append((sub, where[id(sub)]))
    return where


@functools.cache
def _np_dtype(elem_type: int) -> np.dtype | None:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    except (KeyError, ValueError, TypeError):
        return None  # no numpy name: keep what the import found


def _retype(t: gs.Variable, vi: onnx.ValueInfoProto, seen: dict[bytes, tuple] | None = None) -> None:
    """What inference found about a tensor, over what the import had. ``seen``: what each
    serialized TypeProto came to (exports repeat a few types thousands of times; reading the
    protobuf fields of every one was a sixth of a 100k-node import)."""
    key = vi.type.SerializeToString() if seen is not None else None
    found = seen.get(key) if seen is not None else None
    if found is None:
        found = (None, None)
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            shape = tuple([d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]) \
                if tt.HasField("shape") else None
            found = (_np_dtype(tt.elem_type) if tt.elem_type else None, shape)
        if seen is not None:
            seen[key] = found
    dtype, shape = found
    d = t.__dict__  # plain attributes (Tensor.__setattr__ only special-cases inputs/outputs)
    if dtype is not None:
        d["dtype"] = dtype
    if shape is not None:
        d["shape"] = list(shape)  # each tensor its own list: passes edit shapes in place


def _synced(owner: object, field: str) -> SynchronizedList:
    """An empty SynchronizedList without its constructor's extend()."""
    s = list.__new__(SynchronizedList)
    s.parent_obj, s.field_name = owner, field
    return s


def _variable(name: str) -> gs.Variable:
    v = object.__new__(gs.Variable)
    d = v.__dict__
    d["name"], d["inputs"], d["outputs"] = name, _synced(v, "outputs"), _synced(v, "inputs")
    d["dtype"], d["shape"], d["type"] = None, None, "tensor_type"
    return v


@functools.cache
def _constant_dtype(data_type: int) -> tuple[object, int]:
    """(gs dtype, item size) of an initializer type, as onnx-graphsurgeon computes them."""
    try:
        dtype = gsi.get_numpy_type(data_type)
        dtype = data_type if dtype is None else dtype
        itemsize = gsi.get_itemsize(dtype)
    except Exception as exc:  # noqa: BLE001 - its critical() raises for types it cannot size
        raise _NotCovered from exc
    if itemsize is None:
        raise _NotCovered
    return dtype, itemsize


def _constant(t: onnx.TensorProto) -> gs.Constant:
    dtype, itemsize = _constant_dtype(t.data_type)
    lazy = object.__new__(LazyValues)
    count = 1
    for d in t.dims:
        count *= d
    lazy.tensor, lazy.shape, lazy.dtype, lazy.nbytes = t, t.dims, dtype, count * itemsize
    c = object.__new__(gs.Constant)
    d = c.__dict__
    d["name"], d["inputs"], d["outputs"] = t.name, _synced(c, "outputs"), _synced(c, "inputs")
    d["_values"] = lazy
    d["data_location"] = int(t.data_location) if t.HasField("data_location") else None
    d["_export_dtype"] = None
    return c


#: Attribute values by type, as onnx-graphsurgeon converts them (graph-valued ones are not covered).
_ATTRS = {
    _A.FLOAT: lambda a: a.f,
    _A.INT: lambda a: a.i,
    _A.STRING: lambda a: a.s.decode(),
    _A.TENSOR: lambda a: _constant(a.t),
    _A.FLOATS: lambda a: list(a.floats) or TypedEmpty(_A.FLOATS),
    _A.INTS: lambda a: list(a.ints) or TypedEmpty(_A.INTS),
    _A.STRINGS: lambda a: [s.decode() for s in a.strings] or TypedEmpty(_A.STRINGS),
}


class _Import:
    def __init__(self, model: onnx.ModelProto, infos: Infos) -> None:
        self.model, self.infos = model, infos
        self.tensors: dict[str, gs.Tensor] = {}
        self.sources: Sources = {}

    def graph(self) -> gs.Graph:
        m, g = self.model, self.model.graph
        tensors = self.tensors
        for t in g.initializer:
            tensors.setdefault(t.name, _constant(t))
        for vi in g.value_info:  # as onnx-graphsurgeon: the first one found, merged with repeats
            imported = gsi.OnnxImporter.import_tensor(vi)
            known = tensors.get(vi.name)
            if known is None:
                tensors[vi.name] = imported
            elif isinstance(known, gs.Variable):
                known.dtype, known.shape = known.dtype or imported.dtype, known.shape or imported.shape
        weights = {t.name for t in g.initializer}
        inputs = [self._declared(vi) for vi in g.input if vi.name not in weights]
        outputs = [self._declared(vi) for vi in g.output]
        nodes = [self._node(n) for n in g.node]
        seen: dict[bytes, tuple] = {}
        infos = _resolved(self.infos)
        for name, t in tensors.items():
            vi = infos.get(name)
            if vi is not None and isinstance(t, gs.Variable):
                _retype(t, vi, seen)
        # Built empty, then given its nodes: the constructor merges its subgraphs' function lists,
        # a walk over every node's attributes, and a graph this importer covers has neither.
        graph = gs.Graph(nodes=[], inputs=inputs, outputs=outputs, name=g.name, doc_string=g.doc_string,
                         producer_name=m.producer_name, producer_version=m.producer_version,
                         opset=gsi.OnnxImporter.get_opset(m), import_domains=m.opset_import, functions=[],
                         ir_version=m.ir_version)
        graph.nodes = nodes
        graph.gf_names = {*tensors, *(n.name for n in nodes)}  # what Builder.name must not hand out
        return graph

    def _declared(self, vi: onnx.ValueInfoProto) -> gs.Tensor:
        known = self.tensors.get(vi.name)
        if known is None:
            known = self.tensors[vi.name] = gsi.OnnxImporter.import_tensor(vi)
        return known

    def _tensor(self, name: str) -> gs.Tensor:
        t = self.tensors.get(name)
        if t is None:
            if not name:
                return _variable("")  # an omitted optional input/output: never shared
            t = self.tensors[name] = _variable(name)
        return t

    def _node(self, p: onnx.NodeProto) -> gs.Node:
        # Hot (once per node): each protobuf field is read once, lists are filled without
        # SynchronizedList's bookkeeping (the back links are set here, as it would set them).
        attrs = {}
        if p.attribute:
            for a in p.attribute:
                convert = _ATTRS.get(a.type)
                if convert is None or a.ref_attr_name:
                    raise _NotCovered
                attrs[a.name] = convert(a)
        node = object.__new__(gs.Node)
        d = node.__dict__
        op = d["op"] = p.op_type
        d["name"], d["attrs"] = p.name, attrs
        in_names, out_names = tuple(p.input), tuple(p.output)
        tensors, tensor = self.tensors, self._tensor
        ins = _synced(node, "outputs")
        outs = _synced(node, "inputs")
        for name in in_names:
            t = tensors.get(name) if name else None
            if t is None:
                t = tensor(name)
            list.append(ins, t)
            list.append(t.outputs, node)
        for name in out_names:
            t = tensors.get(name) if name else None
            if t is None:
                t = tensor(name)
            list.append(outs, t)
            list.append(t.inputs, node)
        d["inputs"], d["outputs"] = ins, outs
        d["domain"] = domain = p.domain if p.HasField("domain") else None
        self.sources[id(node)] = (p, (op, domain, in_names, out_names,
                                      tuple([(k, id(v)) for k, v in attrs.items()]) if attrs else ()), False)
        return node
