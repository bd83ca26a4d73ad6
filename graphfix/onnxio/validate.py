"""What graphfix refuses at load, in one line: checker problems, unknown domains, undecodable
fields, tensors larger than their data.
"""

from __future__ import annotations

import functools
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as default
from pathlib import Path

import onnx

from graphfix.errors import GraphfixError, first_line
from graphfix.onnxio import paths
from graphfix.onnxio.dims import DeclaredDims, clear_subgraph_dims
from graphfix.onnxio.dims import clear as clear_odd_dims
from graphfix.onnxio.domains import notes as domain_notes
from graphfix.onnxio.domains import without_contrib_ops
from graphfix.onnxio.external import has_external
from graphfix.onnxio.ir import MIN_OPSET, default_opset, runtime_compatible
from graphfix.onnxio.proto import (
    _CHECK_WEIGHTLESS_ABOVE,
    _FOUR_BIT,
    _STUB_DATA,
    _T,
    WEIGHTLESS_ABOVE,
    _itemsize,
    elements,
    estimated_size,
    mark_stub_external,
    weightless,
)


def check_graph(model: onnx.ModelProto, where: str, checker: bool = True,
                early: Callable[[onnx.ModelProto], None] | None = None) -> Accepted:
    """Reject graphs graphfix cannot rewrite safely: unsupported opset, cycles, dangling inputs.
    ``checker=False``: all but onnx.checker, which the caller runs (:func:`reject_checker_problem`),
    e.g. in graphfix's worker beside the import. ``early``: called once the graph's declared
    shapes are sane (dims of -1 and 0 cleared, :mod:`graphfix.onnxio.dims`), before the walk over
    every node: what it starts elsewhere runs meanwhile. Changes ``model``: declared dims of -1
    or 0 are cleared (returned, for the written model to get them back, with the notes)."""
    accepted = _check_domains(model, where, early)
    opset = default_opset(model)
    newest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= newest:
        raise GraphfixError(f"unsupported opset {opset} (graphfix handles {MIN_OPSET}..{newest})", where)
    if checker:
        reject_checker_problem(model, where, checker_problem(model))
    return accepted


def reject_checker_problem(model: onnx.ModelProto, where: str, problem: str | None) -> None:
    if problem:  # a dangling input or a cycle is named better than the checker's "not sorted"
        raise GraphfixError(f"invalid graph: {structural_problem(model.graph) or problem}", where)


def checker_input(model: onnx.ModelProto) -> tuple[bytes, bool]:
    """What onnx.checker is given: the model's bytes, or (above 64 MB, or with external data) the
    weightless model's with stub external data, to be checked from a file (``True``)."""
    if not checks_weightless(model):
        return model.SerializeToString(), False
    return weightless(model, external_stubs=True).SerializeToString(), True


def checks_weightless(model: onnx.ModelProto) -> bool:
    """The checker is given the weightless model (a big one: it serializes what it checks)."""
    return estimated_size(model) > _CHECK_WEIGHTLESS_ABOVE or has_external(model)


def checker_input_of_weightless(work: bytes) -> bytes:
    """:func:`checker_input`'s bytes for a model without external data that :func:`checks_weightless`,
    from its weightless copy's bytes: the same stubs, marked as stub external data in place (no
    second copy of the graph)."""
    model = onnx.load_from_string(work)
    for t in model.graph.initializer:
        if elements(t) > WEIGHTLESS_ABOVE:  # a stub: weightless() keeps smaller tensors whole
            mark_stub_external(t)
    return model.SerializeToString()


def _check(data: bytes, from_file: bool, full_check: bool) -> None:
    """onnx.checker on ``data``; where it stops at an op onnxruntime registers in the ONNX domain
    ("No Op registered for SimplifiedLayerNormalization"), again with those ops out of its way
    (:mod:`graphfix.onnxio.domains`): the same in the worker and here, at no cost otherwise."""
    for _ in range(2):
        try:
            _check_once(data, from_file, full_check)
            return
        except onnx.checker.ValidationError as exc:
            moved = without_contrib_ops(data, str(exc))
            if moved is None and not full_check:
                moved = _outputs_shaped(data, str(exc))
            if moved is None:
                raise
            data = moved
    _check_once(data, from_file, full_check)


#: onnx.checker's complaint about an output typed without a shape (TorchScript's rank-deciding
#: Ifs write them; onnxruntime runs them): tolerated (:func:`_complaint`), but the checker stops
#: there, before the nodes.
SHAPELESS_OUTPUT = "Field 'shape' of 'type' is required but missing"
#: ... and an output with no type at all (the TorchScript exporter's `stateN` of a scripted VAD;
#: onnxruntime runs it), which the checker reaches once it goes on past the first.
UNTYPED_OUTPUT = "Unrecognized type value case"


def _outputs_shaped(data: bytes, complaint: str) -> bytes | None:
    """``data`` with every output (and input, and value_info: onnxruntime runs an input typed
    without a shape too) typed without a shape given an empty one, where the checker stopped at
    one: so that it goes on to the nodes (an attribute of the wrong type, a node without its
    outputs, a Pad without its pads input were let through, then exit 3 inside a pass; found by
    the fuzz). For the structural check only (an empty shape says rank 0 to inference)."""
    if SHAPELESS_OUTPUT not in complaint and UNTYPED_OUTPUT not in complaint:
        return None
    model = onnx.load_from_string(data)

    def walk(g: onnx.GraphProto) -> None:
        for vi in g.output:
            if vi.type.WhichOneof("value") is None:  # typed as anything: this check does not infer
                vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        for vi in (*g.input, *g.output, *g.value_info):
            if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
                vi.type.tensor_type.shape.SetInParent()
        for n in g.node:
            for a in n.attribute:
                for sub in [a.g] if a.HasField("g") else list(a.graphs):
                    walk(sub)

    walk(model.graph)
    return model.SerializeToString()


def _check_once(data: bytes, from_file: bool, full_check: bool) -> None:
    if not from_file:
        onnx.checker.check_model(data, full_check=full_check)
        return
    with tempfile.TemporaryDirectory(prefix="graphfix-check-") as d:
        Path(d, _STUB_DATA).touch()
        path = Path(d, "model.onnx")
        path.write_bytes(data)
        onnx.checker.check_model(str(path), full_check=full_check)


def checker_problem(model: onnx.ModelProto, full_check: bool = False) -> str | None:
    """onnx.checker's complaint, if any. An op version the standard has since deprecated (opset-18
    GroupNormalization, which exports and onnxruntime use) is not a problem for graphfix."""
    return _complaint(lambda: _check(*checker_input(model), full_check))


def checked_bytes_problem(data: bytes, from_file: bool) -> str | None:
    """:func:`checker_problem` of what :func:`checker_input` gave (run where the bytes were sent)."""
    return _complaint(lambda: _check(data, from_file, False))


def _complaint(check) -> str | None:
    try:
        check()
    except UnicodeDecodeError as exc:  # a name or attribute string is not UTF-8 (a corrupt file)
        return f"a name or string is not valid UTF-8 ({first_line(exc)})"
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError, ...
        text = first_line(exc)
        # an op version since deprecated (opset-18 GroupNormalization), or a graph or branch output
        # typed without a shape, which the TorchScript exporter writes for a rank an If decides:
        # onnxruntime runs both, only onnx's checker objects
        tolerated = ("is deprecated in domain_version", SHAPELESS_OUTPUT, UNTYPED_OUTPUT)
        return None if any(t in text for t in tolerated) else text
    return None


@dataclass
class Accepted:
    """What the load let through that onnxruntime runs and onnx's tools alone would trip on: the
    declared dims of -1 or 0 it cleared (:mod:`graphfix.onnxio.dims`) and the report's notes
    about them and about :mod:`graphfix.onnxio.domains`."""

    declared: DeclaredDims = default(default_factory=DeclaredDims)
    notes: list[str] = default(default_factory=list)


@dataclass
class _Seen:
    """Gathered by the one walk over every node (a second walk cost 0.2 s per 100k nodes)."""

    opset: int = 0
    ops: set[str] = default(default_factory=set)
    domains: set[str] = default(default_factory=set)
    subgraphs: list[onnx.GraphProto] = default(default_factory=list)


def _check_domains(model: onnx.ModelProto, where: str,
                   early: Callable[[onnx.ModelProto], None] | None = None) -> Accepted:
    """What onnx.checker lets through but graphfix cannot work on: no standard opset (a model of
    ai.onnx.ml only), undecodable names and types, more than protobuf's 2 GiB. Declared dims of
    -1 or 0 are not refused (onnxruntime runs such models): cleared, and returned."""
    bad = _undecodable_field(model)
    if bad:
        raise GraphfixError(f"invalid model: {bad} is not valid UTF-8", where)
    if not any(imp.domain in ("", "ai.onnx") for imp in model.opset_import):
        others = ", ".join(f"{imp.domain} {imp.version}" for imp in model.opset_import)
        only = f"only {others}" if others else "its opset_import list is empty"
        raise GraphfixError(f"imports no standard ONNX opset ({only}); graphfix rewrites standard ONNX operators", where)

    declared = clear_odd_dims(model, top_only=True)  # before ``early``: what it sends elsewhere is cleared
    problem = _declared_problem(model.graph)
    if not problem and early is not None:
        early(model)
    seen = _Seen(opset=default_opset(model))
    problem = problem or _graph_problem(model.graph, declared=False, seen=seen)
    if problem:
        raise GraphfixError(f"invalid graph: {problem}", where)
    if estimated_size(model) > paths.MAX_MODEL_BYTES:
        raise GraphfixError("model is larger than protobuf's 2 GiB limit; graphfix handles models up to 2 GiB for now", where)
    declared.update(clear_subgraph_dims(seen.subgraphs))
    return Accepted(declared, [*declared.notes(), *domain_notes(model, seen.ops, seen.domains)])


#: Typed data field of each element type, and how many entries one element takes there.
_FIELDS = {
    _T.FLOAT: ("float_data", 1), _T.COMPLEX64: ("float_data", 2), _T.DOUBLE: ("double_data", 1),
    _T.COMPLEX128: ("double_data", 2), _T.INT64: ("int64_data", 1), _T.UINT32: ("uint64_data", 1),
    _T.UINT64: ("uint64_data", 1), _T.STRING: ("string_data", 1),
}
#: The element types this onnx knows (a corrupt file can carry any number).
_ELEMENT_TYPES = frozenset(_T.DataType.values())


#: The most dimensions a tensor may have: numpy's limit (onnxruntime's tensors are numpy arrays here).
MAX_RANK = 64
#: Tensors up to this many elements are checked for data matching their dims (passes may read them).
_SIZE_CHECK_LIMIT = 1 << 20


def _undecodable_field(model: onnx.ModelProto) -> str | None:
    """A string field of the model, its graph, metadata or opset list that protobuf could not
    decode as UTF-8 (it hands back bytes, and copying the field then fails): a corrupt file."""
    messages = [("model", model), ("graph", model.graph), *(("metadata", p) for p in model.metadata_props),
                *(("opset_import", o) for o in model.opset_import)]
    for where, message in messages:
        for field, value in message.ListFields():
            if field.type == field.TYPE_STRING and not field.is_repeated and isinstance(value, bytes):
                return f"{where} field {field.name} ({value[:40]!r})"
    return None


def _declared_problem(graph: onnx.GraphProto) -> str | None:
    """The graph's own inputs, outputs and value_info (not its subgraphs'): names, types, dims."""
    for kind, infos in (("input", graph.input), ("output", graph.output), ("value", graph.value_info)):
        for vi in infos:
            if not isinstance(vi.name, str):
                return f"a tensor name is not valid UTF-8 ({vi.name[:40]!r})"
            if vi.type.HasField("tensor_type"):
                if vi.type.tensor_type.elem_type not in _ELEMENT_TYPES or (kind == "input" and vi.type.tensor_type.elem_type == _T.UNDEFINED):
                    return f"{kind} '{vi.name}' declares an unknown element type ({vi.type.tensor_type.elem_type})"
                if len(vi.type.tensor_type.shape.dim) > MAX_RANK:
                    return f"{kind} '{vi.name}' declares {len(vi.type.tensor_type.shape.dim)} dimensions (at most {MAX_RANK})"
    return None


#: Attributes whose out-of-range values crash or hang onnx's shape inference (a segfault or an
#: endless loop in C++, not an exception: the end of graphfix's process or a run that never
#: ends), by op and name, with the values onnx handles. onnxruntime runs none of the refused
#: values (GatherND: batch_dims -1 fails in its kernel; Einsum's spec allows letters, commas,
#: "->", "..." and spaces). Found by the mutation fuzz (tests/helpers/valid_mutations.py, onnx 1.23).
_EINSUM_CHARACTERS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,.-> ")
_INFERENCE_CRASHES: dict[str, dict[str, Callable[[onnx.AttributeProto], bool]]] = {
    "GatherND": {"batch_dims": lambda a: 0 <= a.i < 2**31},  # -2147483649 segfaults infer_shapes
    "Einsum": {"equation": lambda a: set(a.s) <= _EINSUM_CHARACTERS},  # "ab\n" on a rank-2 input loops forever
}


def _shown(value: object) -> str:
    text = repr(value.decode(errors="replace") if isinstance(value, bytes) else value)
    return text if len(text) <= 40 else text[:37] + "..."


_A = onnx.AttributeProto


@functools.cache
def declared_attribute_types(op_type: str, opset: int) -> dict[str, int]:
    """The attribute types (AttributeProto.AttributeType) the ONNX schema of ``op_type`` at
    ``opset`` declares ({} for an op onnx does not know). onnx.checker compares them, but stops at
    the first complaint, including those graphfix tolerates (an op version since deprecated,
    opset-18 GroupNormalization), before the node's attributes: a ``num_groups`` given as a tensor
    then reached a pass (exit 3; found by the fuzz). onnxruntime refuses such a node."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return {}
    return {name: int(a.type) for name, a in schema.attributes.items()}


def _graph_problem(graph: onnx.GraphProto, declared: bool = True, seen: _Seen | None = None) -> str | None:
    """One walk over the graph and its subgraphs for what would break graphfix later: a name
    protobuf could not decode as UTF-8 (it hands back bytes; a corrupt file), a string attribute
    that is not UTF-8 (the importer decodes them), an initializer or Constant value
    whose data does not hold prod(dims) elements (numpy's reshape would fail inside a pass).
    ``declared=False``: the graph's own inputs, outputs and value_info are checked already.
    ``seen``: gathers the ops, domains and subgraphs met."""
    found = _declared_problem(graph) if declared else None
    if found:
        return found
    seen = seen if seen is not None else _Seen()
    ops, domains = seen.ops, seen.domains
    tensors = list(graph.initializer)
    for n in graph.node:
        op, domain = n.op_type, n.domain
        try:
            "".join((n.name, op, domain, *n.input, *n.output))
        except TypeError:
            bad = next(t for t in (n.name, op, domain, *n.input, *n.output) if not isinstance(t, str))
            return f"a node name or tensor name is not valid UTF-8 ({bad[:40]!r})"
        ops.add(op)
        domains.add(domain)
        attributes = n.attribute
        if not attributes:
            continue
        standard = not domain or domain == "ai.onnx"
        crashes = _INFERENCE_CRASHES.get(op) if standard else None
        types = declared_attribute_types(op, seen.opset) if standard else None
        for a in attributes:
            if types and types.get(a.name, a.type) != a.type and not a.ref_attr_name:
                return (f"attribute '{a.name}' of {op} node '{n.name or op}' is {_A.AttributeType.Name(a.type)}, "
                        f"the op takes {_A.AttributeType.Name(types[a.name])}")
            value, values = a.s, a.strings
            if (value and not _utf8(value)) or (values and not all(_utf8(s) for s in values)):
                return f"attribute '{a.name}' of node '{n.name or n.op_type}' is a string that is not valid UTF-8"
            if crashes and a.name in crashes and not crashes[a.name](a):
                shown = _shown(onnx.helper.get_attribute_value(a))
                return f"attribute '{a.name}' of {op} node '{n.name or op}' is {shown}, out of its range (onnx's shape inference crashes or hangs on it)"
            if a.HasField("t"):
                tensors.append(a.t)
            elif a.type == _A.TENSOR:  # the fuzz's "clear AttributeProto.t": exit 3 in the export and the report
                return f"attribute '{a.name}' of node '{n.name or op}' is a tensor attribute without its tensor"
            tensors.extend(a.tensors)
            for g in [a.g] if a.HasField("g") else list(a.graphs):
                seen.subgraphs.append(g)
                found = _graph_problem(g, seen=seen)
                if found:
                    return found
    for t in tensors:
        found = _tensor_problem(t)
        if found:
            return found
    return None


def _tensor_problem(t: onnx.TensorProto) -> str | None:
    """Each field read once (a protobuf read makes a Python object): 50,000 tensors on bench/scale.py."""
    name, data_type, dims = t.name, t.data_type, t.dims
    if not isinstance(name, str):
        return f"a tensor name is not valid UTF-8 ({name[:40]!r})"
    if data_type not in _ELEMENT_TYPES or data_type == _T.UNDEFINED:
        return f"tensor '{name}' has an unknown element type ({data_type})"
    if len(dims) > MAX_RANK:
        return f"tensor '{name}' has {len(dims)} dimensions (at most {MAX_RANK})"
    return _size_problem(t, data_type, dims)


def _utf8(value: bytes) -> bool:
    """ONNX string attributes are UTF-8 text held as bytes (the importer decodes them)."""
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def _size_problem(t: onnx.TensorProto, data_type: int, dims) -> str | None:
    if t.data_location == _T.EXTERNAL or (dims and min(dims) < 0):
        return None  # external sizes are checked against the file; negative dims by onnx.checker
    count = math.prod(dims)
    if count > _SIZE_CHECK_LIMIT:
        return None  # reading raw_data copies it; passes never read tensors this big (fold limit)
    if data_type in _FOUR_BIT:
        want, have = ((count + 1) // 2, len(t.raw_data)) if t.HasField("raw_data") else ((count + 1) // 2, len(t.int32_data))
    elif t.HasField("raw_data"):
        itemsize = _itemsize(data_type)
        if itemsize is None:
            return None  # an unknown type is onnx.checker's to report
        want, have = count * itemsize, len(t.raw_data)
    else:
        field, per = _FIELDS.get(data_type, ("int32_data", 1))
        want, have = count * per, len(getattr(t, field))
    if want != have:
        return f"tensor '{t.name}' has dims {list(dims)} ({count} element(s)) but holds data for a different count"
    return None


def structural_problem(graph: onnx.GraphProto) -> str | None:
    """A dangling input or a cycle in the top-level graph, named (one linear Kahn walk)."""
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    produced = {o: k for k, n in enumerate(graph.node) for o in n.output}
    for n in graph.node:
        for i in n.input:
            if i not in available and i not in produced:
                return f"node '{n.name or n.op_type}' reads '{i}', which no node, initializer or graph input provides"
    waiting = [len({i for i in n.input if i in produced}) for n in graph.node]
    consumers: dict[str, list[int]] = {}
    for k, n in enumerate(graph.node):
        for i in set(n.input):
            if i in produced:
                consumers.setdefault(i, []).append(k)
    ready = [k for k, w in enumerate(waiting) if w == 0]
    done = 0
    while ready:
        k = ready.pop()
        done += 1
        for o in graph.node[k].output:
            for c in consumers.get(o, ()):
                waiting[c] -= 1
                if waiting[c] == 0:
                    ready.append(c)
    if done < len(graph.node):
        stuck = next(n for k, n in enumerate(graph.node) if waiting[k] > 0)
        return f"the graph has a cycle (node '{stuck.name or stuck.op_type}' waits on its own output)"
    for o in graph.output:
        if o.name not in produced and o.name not in available:
            return f"graph output '{o.name}' is not produced by any node"
    return None


def declared_shapes(model: onnx.ModelProto) -> frozenset[str]:
    """Names of the tensors whose shapes ``model`` declares (value_info and outputs, subgraphs too;
    graph inputs excepted): what an exporter may have got wrong, measured once on the input."""
    names: set[str] = set()

    def walk(g: onnx.GraphProto) -> None:
        names.update(vi.name for vi in (*g.value_info, *g.output))
        for n in g.node:
            for a in n.attribute:
                for sub in [a.g] if a.HasField("g") else list(a.graphs):
                    walk(sub)

    walk(model.graph)
    return frozenset(names)


def relaxed_problem(model: onnx.ModelProto, names: frozenset[str]) -> str | None:
    """The full check's complaint about ``model`` once the shapes it declares for ``names`` (the
    input's own declarations) are forgotten. A legacy scatter_reduce export declares its If branch
    outputs [24] while computing [3, 8]; the input passes only while inference cannot see through
    the If, and any rewrite that lets it see is refused with "Inferred shape and existing shape
    differ in rank" at a node the rewrite never touched. The wrong shape is the input's, not the
    rewrite's (whose outputs verification compares, shapes included)."""
    stub = weightless(model)

    def walk(g: onnx.GraphProto) -> None:
        kept = [vi for vi in g.value_info if vi.name not in names]
        del g.value_info[:]
        g.value_info.extend(kept)
        for vi in g.output if g is not stub.graph else ():
            if vi.name in names and vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
        for n in g.node:
            for a in n.attribute:
                for sub in [a.g] if a.HasField("g") else list(a.graphs):
                    walk(sub)

    walk(stub.graph)
    # a graph output must keep a shape: the one inference finds without the declaration
    outputs = [vi for vi in stub.graph.output]
    del stub.graph.output[:]
    try:
        found = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(stub).graph.value_info}
    except Exception:  # noqa: BLE001 - the full check below says what is wrong
        found = {}
    for vi in outputs:
        inferred = found.get(vi.name) if vi.name in names else None
        stub.graph.output.append(inferred if inferred is not None and inferred.type.tensor_type.HasField("shape") else vi)
    return checker_problem(stub, full_check=True)


def passes_full_check(model: onnx.ModelProto) -> bool:
    try:
        return checker_problem(runtime_compatible(model), full_check=True) is None
    except GraphfixError:
        return False
