"""Tensor sizes, a model as stub + initializers (:class:`Assembled`), and streamed serialization
with one weight in memory at a time.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

import onnx

from graphfix.onnxio.ir import runtime_compatible

#: 2 GiB protobuf limit: larger models are written with external data.
PROTO_LIMIT = 2**31 - 1


#: Initializers with more elements than this are left out of shape inference and the checker
#: (only their type and dims matter there; data propagation needs small shape-like values only).
WEIGHTLESS_ABOVE = 1024
#: Above this estimated size the checker runs on the weightless model: onnx.checker serializes
#: the model it is given (twice, with its size check), which on a big export is two more copies
#: of every weight.
_CHECK_WEIGHTLESS_ABOVE = 64 << 20
_STUB_DATA = "graphfix-weightless.data"


#: The ONNX ops with graph attributes (bodies).
CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def proto_text(value: str | bytes) -> str:
    """A protobuf string field as text: one that is not UTF-8 (a dim name; onnxruntime runs such a
    model) comes back as bytes, shown with its bad bytes escaped."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of the graph and of its If/Loop/Scan bodies, nested ones included, depth first
    (only those ops' attributes are looked at)."""
    for n in graph.node:
        yield n
        if n.op_type in CONTROL_FLOW:
            for a in n.attribute:
                if a.HasField("g"):
                    yield from all_nodes(a.g)
                for sub in a.graphs:
                    yield from all_nodes(sub)


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
    """tensor_bytes (8 bytes an element where that is None) of every inline initializer, each
    field read once: a run asks three times, 25,000 initializers each on bench/scale.py."""
    total, external = 256 * nodes, onnx.TensorProto.EXTERNAL
    for t in initializers:
        if t.data_location == external:
            continue
        dims = t.dims
        count = math.prod(dims)
        itemsize = _itemsize(t.data_type)
        total += 8 * max(count, 0) if itemsize is None or (dims and min(dims) < 0) else count * itemsize
    return total


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
            mark_stub_external(s)
    return stub


def mark_stub_external(stub: onnx.TensorProto) -> None:
    """Say a data-less stub's data lives in ``_STUB_DATA`` (an empty file the checker finds)."""
    stub.data_location = onnx.TensorProto.EXTERNAL
    entry = stub.external_data.add()
    entry.key, entry.value = "location", _STUB_DATA


_T = onnx.TensorProto
_FOUR_BIT = {getattr(_T, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(_T, n)}


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
