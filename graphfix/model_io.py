"""Loading, validating and atomically saving ONNX models.

onnx >= 1.23 writes IR version 14 while onnxruntime 1.31 reads at most 13 (1.32 reads 14), so
every model that leaves graphfix (to disk or to an onnxruntime session) goes through
:func:`runtime_compatible`, which asks the installed onnxruntime what it reads.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from graphfix.atomic import first_line, write_atomic  # noqa: F401 - re-exported: the one writer
from graphfix.errors import GraphfixError

#: Default-domain opsets graphfix rewrites (onnxruntime's CPU kernels start at 7; TensorRT parsers at 9).
MIN_OPSET = 7
#: 2 GiB protobuf limit: larger models are written with external data.
_PROTO_LIMIT = 2**31 - 1


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Read and structurally check a model; every failure is a GraphfixError naming the file."""
    p = Path(path)
    if not p.exists():
        raise GraphfixError("no such file", str(p))
    if p.is_dir():
        raise GraphfixError("is a directory, not an ONNX file", str(p))
    _check_source(p)
    try:
        model = onnx.load(str(p), load_external_data=False)
        from graphfix import external

        external.load_small(model, p.parent)
    except (DecodeError, RuntimeError, ValueError, OSError, onnx.checker.ValidationError) as exc:
        raise GraphfixError(f"not a readable ONNX model ({first_line(exc)})", str(p)) from exc
    if not model.graph.node and not model.graph.output:
        raise GraphfixError("not an ONNX model (no graph, no outputs)", str(p))
    check_graph(model, str(p))
    return model


def _check_source(p: Path) -> None:
    """Before reading: a regular file protobuf can parse, external data inside its folder."""
    from graphfix.paths import read_plan

    read_plan(p)


def default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def check_graph(model: onnx.ModelProto, where: str) -> None:
    """Reject graphs graphfix cannot rewrite safely: unsupported opset, cycles, dangling inputs."""
    _check_domains(model, where)
    opset = default_opset(model)
    newest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= newest:
        raise GraphfixError(f"unsupported opset {opset} (graphfix handles {MIN_OPSET}..{newest})", where)
    problem = checker_problem(model)
    if problem:  # a dangling input or a cycle is named better than the checker's "not sorted"
        raise GraphfixError(f"invalid graph: {structural_problem(model.graph) or problem}", where)


#: Initializers with more elements than this are left out of shape inference and the checker
#: (only their type and dims matter there; data propagation needs small shape-like values only).
WEIGHTLESS_ABOVE = 1024
#: Above this estimated size the checker runs on the weightless model: onnx.checker serializes
#: the model it is given (twice, with its size check), which on a big export is two more copies
#: of every weight.
_CHECK_WEIGHTLESS_ABOVE = 64 << 20
_STUB_DATA = "graphfix-weightless.data"


def elements(t: onnx.TensorProto) -> int:
    count = 1
    for d in t.dims:
        count *= d
    return count


def tensor_bytes(t: onnx.TensorProto) -> int | None:
    """dims x itemsize: the bytes the tensor's data takes (None for strings, 4-bit types, unknown
    types and negative dims, whose size is not that product)."""
    itemsize = _itemsize(t.data_type)
    if itemsize is None or any(d < 0 for d in t.dims):
        return None
    return elements(t) * itemsize


@functools.cache
def _itemsize(data_type: int) -> int | None:
    if data_type == onnx.TensorProto.STRING or data_type in _FOUR_BIT:
        return None
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return None


def estimated_size(model: onnx.ModelProto) -> int:
    """The serialized size, dominated by the weights, without serializing (upb's ByteSize() does)."""
    return _estimate(model.graph.initializer, len(model.graph.node))


def _estimate(initializers, nodes: int) -> int:
    inline = (t for t in initializers if t.data_location != onnx.TensorProto.EXTERNAL)
    return sum(tensor_bytes(t) or 8 * max(elements(t), 0) for t in inline) + 256 * nodes


def weightless(model: onnx.ModelProto, external_stubs: bool = False) -> onnx.ModelProto:
    """A copy of ``model`` whose big initializers keep their name, type and dims but no data
    (``external_stubs``: marked as external data in ``_STUB_DATA``, which the checker accepts)."""
    stub = _without_initializers(model)
    for t in model.graph.initializer:
        if elements(t) <= WEIGHTLESS_ABOVE and t.data_location != onnx.TensorProto.EXTERNAL:
            stub.graph.initializer.append(t)
            continue
        s = stub.graph.initializer.add()
        s.name, s.data_type = t.name, t.data_type
        s.dims.extend(t.dims)
        if external_stubs:
            s.data_location = onnx.TensorProto.EXTERNAL
            entry = s.external_data.add()
            entry.key, entry.value = "location", _STUB_DATA
    return stub


def _check(model: onnx.ModelProto, full_check: bool) -> None:
    from graphfix.external import has_external

    if estimated_size(model) <= _CHECK_WEIGHTLESS_ABOVE and not has_external(model):
        onnx.checker.check_model(model, full_check=full_check)
        return
    with tempfile.TemporaryDirectory(prefix="graphfix-check-") as d:
        Path(d, _STUB_DATA).touch()
        path = Path(d, "model.onnx")
        path.write_bytes(weightless(model, external_stubs=True).SerializeToString())
        onnx.checker.check_model(str(path), full_check=full_check)


def checker_problem(model: onnx.ModelProto, full_check: bool = False) -> str | None:
    """onnx.checker's complaint, if any. An op version the standard has since deprecated (opset-18
    GroupNormalization, which exports and onnxruntime use) is not a problem for graphfix."""
    try:
        _check(model, full_check)
    except UnicodeDecodeError as exc:  # a name or attribute string is not UTF-8 (a corrupt file)
        return f"a name or string is not valid UTF-8 ({first_line(exc)})"
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError, ...
        text = first_line(exc)
        return None if "is deprecated in domain_version" in text else text
    return None


def _check_domains(model: onnx.ModelProto, where: str) -> None:
    """What onnx.checker lets through but graphfix cannot work on: no standard opset (a model of
    ai.onnx.ml only), negative declared dims, more than protobuf's 2 GiB."""
    bad = _undecodable_field(model)
    if bad:
        raise GraphfixError(f"invalid model: {bad} is not valid UTF-8", where)
    if not any(imp.domain in ("", "ai.onnx") for imp in model.opset_import):
        others = ", ".join(f"{imp.domain} {imp.version}" for imp in model.opset_import)
        only = f"only {others}" if others else "its opset_import list is empty"
        raise GraphfixError(f"imports no standard ONNX opset ({only}); graphfix rewrites standard ONNX operators", where)
    from graphfix.paths import MAX_MODEL_BYTES

    problem = _graph_problem(model.graph)
    if problem:
        raise GraphfixError(f"invalid graph: {problem}", where)
    if estimated_size(model) > MAX_MODEL_BYTES:
        raise GraphfixError("model is larger than protobuf's 2 GiB limit; graphfix handles models up to 2 GiB for now", where)


_T = onnx.TensorProto
#: Typed data field of each element type, and how many entries one element takes there.
_FIELDS = {
    _T.FLOAT: ("float_data", 1), _T.COMPLEX64: ("float_data", 2), _T.DOUBLE: ("double_data", 1),
    _T.COMPLEX128: ("double_data", 2), _T.INT64: ("int64_data", 1), _T.UINT32: ("uint64_data", 1),
    _T.UINT64: ("uint64_data", 1), _T.STRING: ("string_data", 1),
}
#: The element types this onnx knows (a corrupt file can carry any number).
_ELEMENT_TYPES = frozenset(_T.DataType.values())
_FOUR_BIT = {getattr(_T, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(_T, n)}


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


def _graph_problem(graph: onnx.GraphProto) -> str | None:
    """One walk over the graph and its subgraphs for what would break graphfix later: a name
    protobuf could not decode as UTF-8 (it hands back bytes; a corrupt file), a string attribute
    that is not UTF-8 (the importer decodes them), a declared dimension
    below 0 (onnx's shape inference aborts the process on those), an initializer or Constant value
    whose data does not hold prod(dims) elements (numpy's reshape would fail inside a pass)."""
    for kind, infos in (("input", graph.input), ("output", graph.output), ("value", graph.value_info)):
        for vi in infos:
            if not isinstance(vi.name, str):
                return f"a tensor name is not valid UTF-8 ({vi.name[:40]!r})"
            if vi.type.HasField("tensor_type"):
                dims = [d.dim_value for d in vi.type.tensor_type.shape.dim if d.dim_value < 0]
                if dims:
                    return f"{kind} '{vi.name}' declares dimension {dims[0]} (dimensions are >= 0)"
                if vi.type.tensor_type.elem_type not in _ELEMENT_TYPES or (kind == "input" and vi.type.tensor_type.elem_type == _T.UNDEFINED):
                    return f"{kind} '{vi.name}' declares an unknown element type ({vi.type.tensor_type.elem_type})"
                if len(vi.type.tensor_type.shape.dim) > MAX_RANK:
                    return f"{kind} '{vi.name}' declares {len(vi.type.tensor_type.shape.dim)} dimensions (at most {MAX_RANK})"
    tensors = list(graph.initializer)
    for n in graph.node:
        try:
            "".join((n.name, n.op_type, n.domain, *n.input, *n.output))
        except TypeError:
            bad = next(t for t in (n.name, n.op_type, n.domain, *n.input, *n.output) if not isinstance(t, str))
            return f"a node name or tensor name is not valid UTF-8 ({bad[:40]!r})"
        for a in n.attribute:
            if not _utf8(a.s) or not all(_utf8(s) for s in a.strings):
                return f"attribute '{a.name}' of node '{n.name or n.op_type}' is a string that is not valid UTF-8"
            if a.HasField("t"):
                tensors.append(a.t)
            tensors.extend(a.tensors)
            for g in [a.g] if a.HasField("g") else list(a.graphs):
                found = _graph_problem(g)
                if found:
                    return found
    for t in tensors:
        if not isinstance(t.name, str):
            return f"a tensor name is not valid UTF-8 ({t.name[:40]!r})"
        if t.data_type not in _ELEMENT_TYPES or t.data_type == _T.UNDEFINED:
            return f"tensor '{t.name}' has an unknown element type ({t.data_type})"
        if len(t.dims) > MAX_RANK:
            return f"tensor '{t.name}' has {len(t.dims)} dimensions (at most {MAX_RANK})"
        found = _size_problem(t)
        if found:
            return found
    return None


def _utf8(value: bytes) -> bool:
    """ONNX string attributes are UTF-8 text held as bytes (the importer decodes them)."""
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def _size_problem(t: onnx.TensorProto) -> str | None:
    if t.data_location == _T.EXTERNAL or any(d < 0 for d in t.dims):
        return None  # external sizes are checked against the file; negative dims by onnx.checker
    count = elements(t)
    if count > _SIZE_CHECK_LIMIT:
        return None  # reading raw_data copies it; passes never read tensors this big (fold limit)
    if t.data_type in _FOUR_BIT:
        want, have = ((count + 1) // 2, len(t.raw_data)) if t.HasField("raw_data") else ((count + 1) // 2, len(t.int32_data))
    elif t.HasField("raw_data"):
        itemsize = _itemsize(t.data_type)
        if itemsize is None:
            return None  # an unknown type is onnx.checker's to report
        want, have = count * itemsize, len(t.raw_data)
    else:
        field, per = _FIELDS.get(t.data_type, ("int32_data", 1))
        want, have = count * per, len(getattr(t, field))
    if want != have:
        return f"tensor '{t.name}' has dims {list(t.dims)} ({count} element(s)) but holds data for a different count"
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


def _loads(ir_version: int, opset: int) -> bool:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)
    try:
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - "cannot load" is the answer
        return False
    return True


@functools.cache
def runtime_limits() -> tuple[int, int]:
    """(highest IR version, highest default-domain opset) the installed onnxruntime loads, asked of it."""
    ir = next((v for v in range(onnx.IR_VERSION, 6, -1) if _loads(v, 13)), 7)
    opset = next((v for v in range(onnx.defs.onnx_opset_version(), 12, -1) if _loads(ir, v)), 13)
    return ir, opset


def max_ir_version() -> int:
    return runtime_limits()[0]


def runtime_compatible(model: onnx.ModelProto) -> onnx.ModelProto:
    """Clamp the IR version to what onnxruntime reads, without going below what the opsets need."""
    limit = max_ir_version()
    if model.ir_version <= limit:
        return model
    needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    if needed > limit:
        raise GraphfixError(f"needs IR version {needed}; the installed onnxruntime reads at most {limit}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = max(needed, min(model.ir_version, limit))
    return out


class Assembled:
    """A model kept as two parts: ``stub``, everything but the graph's initializers, and the
    initializer protos, most of them the input model's own. Copying a big model's weights into a
    new ModelProto was the largest single cost of a ``--no-verify`` run (1.3-2 s for 400 MB on the
    bench machine, where every copy faults in fresh pages) and one more copy in memory; the writer
    streams them from where they are. :meth:`proto` builds the whole model when one is needed."""

    def __init__(self, stub: onnx.ModelProto, initializers: list[onnx.TensorProto]) -> None:
        self.stub, self.initializers = stub, initializers
        self._proto: onnx.ModelProto | None = None

    @classmethod
    def of(cls, model: onnx.ModelProto | Assembled, to_edit: bool = False) -> Assembled:
        """A model's parts (an Assembled model is its own): a ModelProto's initializers are
        referenced, the rest copied (no weights). ``to_edit``: the parts will be changed, so
        :meth:`proto` must not hand back ``model``."""
        if isinstance(model, Assembled) and not to_edit:
            return model
        proto = model.proto() if isinstance(model, Assembled) else model
        parts = cls(_without_initializers(proto), list(proto.graph.initializer))
        parts._proto = None if to_edit else proto
        return parts

    def compatible(self) -> Assembled:
        """With an IR version the installed onnxruntime reads (the stub holds no weights)."""
        stub = runtime_compatible(self.stub)
        return self if stub is self.stub else Assembled(stub, self.initializers)

    def proto(self) -> onnx.ModelProto:
        if self._proto is None:
            model = onnx.ModelProto()
            model.CopyFrom(self.stub)
            model.graph.initializer.extend(self.initializers)
            self._proto = model
        return self._proto

    def size(self) -> int:
        """Estimated serialized size, as :func:`estimated_size`."""
        return _estimate(self.initializers, len(self.stub.graph.node))


def save_model(model: onnx.ModelProto | Assembled, path: str | os.PathLike, base_dir: str | os.PathLike | None = None,
               external_data: str | None = None) -> str | None:
    """Write with an IR version onnxruntime reads, atomically, streaming the weights.

    A model that references external data (``base_dir``: the folder its locations are relative
    to), is over 2 GiB, or is given an ``external_data`` name is written as two files: the model,
    and its weights in ``<output>.data`` (or ``external_data``, relative to the output's folder).
    Returns the data file's path when one was written.
    """
    from graphfix import atomic, external, paths

    if isinstance(model, Assembled):
        inline = external_data is None and not external.has_external(model)
        if inline and model.size() <= _PROTO_LIMIT:
            parts = model.compatible()
            write_atomic(path, lambda fh: write_streamed(parts, fh))
            return None
        model = model.proto()
    model = runtime_compatible(model)
    if not external.needs_external(model, external_data):
        write_atomic(path, lambda fh: write_streamed(model, fh))
        return None
    data = paths.data_path(path, external_data)
    plan = external.DataPlan(model, None if base_dir is None else Path(base_dir),
                             os.path.relpath(data, Path(path).parent))

    def naming(location: str) -> atomic.Data:  # the model with its weights in ``location``
        return lambda fh: write_streamed(model, fh, plan.stubs(location))

    with atomic.transaction() as tx:
        weights = tx.stage(data, plan.write_data, "external data")
        tx.stage(path, naming(plan.data_name), data_file=weights, naming=naming)
    return str(data)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


#: Wire tags: ModelProto.graph (field 7) and GraphProto.initializer (field 5), length-delimited.
_GRAPH_TAG, _INITIALIZER_TAG = bytes([7 << 3 | 2]), bytes([5 << 3 | 2])


def _without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the model but its graph's initializers (no weights)."""
    stub = onnx.ModelProto()
    copy_fields(model, stub, skip="graph")
    stub.graph.SetInParent()
    copy_fields(model.graph, stub.graph, skip="initializer")
    return stub


def initializers(model: onnx.ModelProto | Assembled):
    """The graph's initializer protos, whichever form the model is in."""
    return model.initializers if isinstance(model, Assembled) else model.graph.initializer


def copy_fields(src, dst, skip: str) -> None:
    """Every set field of ``src`` but ``skip`` into ``dst`` (repeated, message and scalar fields)."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def serialized(model: onnx.ModelProto) -> bytes:
    """The model's bytes, built one initializer at a time (see write_streamed)."""
    import io

    buffer = io.BytesIO()
    write_streamed(model, buffer)
    return buffer.getvalue()


def write_streamed(model: onnx.ModelProto | Assembled, fh, replace=None) -> None:
    """The model's bytes, one initializer at a time (``replace(k, tensor)`` may give the proto to
    write instead of initializer ``k``, e.g. an external-data reference).

    ``SerializeToString`` builds the whole file in memory (one more copy of every weight).
    Protobuf merges repeated occurrences of a message field, so the model without its
    initializers followed by one ``graph { initializer: t }`` record per tensor parses to the same
    model (initializers in the same order), with one tensor's bytes in memory at a time.
    """
    parts = Assembled.of(model)
    fh.write(parts.stub.SerializeToString())
    for k, t in enumerate(parts.initializers):
        written = replace(k, t) if replace is not None else None
        body = (written if written is not None else t).SerializeToString()
        inner_len = len(_INITIALIZER_TAG) + len(_varint(len(body))) + len(body)
        fh.write(_GRAPH_TAG + _varint(inner_len) + _INITIALIZER_TAG + _varint(len(body)))
        fh.write(body)
