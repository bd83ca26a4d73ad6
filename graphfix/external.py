"""Weights kept outside the model: read lazily, never copied twice, written beside the output.

Exports over 2 GiB (diffusion UNets, large detectors, LLM blocks) keep their weights in external
files, because one protobuf message cannot exceed 2 GiB. graphfix never loads those weights:

* the model is read with ``load_external_data=False``; only small external tensors (what a pass
  may fold) are read in, the rest stay references (name, type, dims, location/offset/length);
* passes never need weight values (folding has a size limit), and the export reuses the
  reference protos;
* onnxruntime (in graphfix's worker process) reads the weight files itself
  (``session.model_external_initializers_file_folder_path``), so a session gets the model without
  its weights (no serialized copy);
* the output is written as ``OUT.onnx`` plus one data file (``OUT.onnx.data`` or
  ``--external-data NAME``), every tensor's bytes copied from its source in chunks, one tensor at
  a time. Models that had no external data and fit in 2 GiB stay one file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import numpy_helper

from graphfix.errors import GraphfixError

#: External tensors up to this many bytes are read in at load (passes may fold small constants).
LOAD_SMALL_BELOW = 1 << 20
#: When writing external data, tensors of at least this many bytes go to the data file.
EXTERNAL_ABOVE = 1024
#: Offsets in the data file are aligned like onnx's own writer (page size, for mmap).
_ALIGN = 4096
_CHUNK = 1 << 24
_PROTO_LIMIT = 2**31 - 1


def is_external(t: onnx.TensorProto) -> bool:
    return t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL


def info(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def has_external(model) -> bool:
    """Whether any initializer of the model (a ModelProto or an Assembled one) is external data."""
    from graphfix.model_io import initializers

    return any(is_external(t) for t in initializers(model))


def load_small(model: onnx.ModelProto, base_dir: Path) -> None:
    """Read external tensors smaller than LOAD_SMALL_BELOW into the model; leave the big ones."""
    from onnx.external_data_helper import load_external_data_for_tensor

    for t in model.graph.initializer:
        if is_external(t) and not all(isinstance(e.key, str) and isinstance(e.value, str) for e in t.external_data):
            # a corrupt file (protobuf hands back bytes): onnx's loader would fail with a TypeError
            raise ValueError(f"an external-data entry (key or value) of tensor {t.name!r} is not valid UTF-8")
        if is_external(t) and int(info(t).get("length", 0) or 0) < LOAD_SMALL_BELOW:
            load_external_data_for_tensor(t, str(base_dir))
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]


def session(model, base_dir: Path | str | None, tuned: bool = True):
    """An onnxruntime CPU session in graphfix's worker process (:mod:`graphfix.runtime_worker`:
    a crash or an endless run cannot take graphfix down); external data is read from ``base_dir``
    by onnxruntime itself, and big inline initializers cross to it once, through shared memory,
    and are handed over as OrtValues over those bytes (see :func:`_hand_over`), so the session
    gets no serialized copy of the weights.

    Tuned for the few runs verification makes, on graphs of any size: graph optimizations off
    (both sides run the graph's own ops; on a 100k-node export creating the session took 34.7 s
    with them, 10.8 s without) and no memory pattern (planned during the first run: 33.7 s for
    that run, 0.18 s without). ``tuned=False``: onnxruntime's defaults, for the models those
    settings cannot run (see :func:`graphfix.verify.run`)."""
    from graphfix import runtime_worker
    from graphfix.model_io import Assembled, serialized

    parts = Assembled.of(model)
    if has_external(parts) and base_dir is None:
        raise GraphfixError("the model references external data but its folder is unknown (load it from a path)")
    stub, names, arrays = _hand_over(parts)
    folder = str(base_dir) if has_external(parts) else None
    return runtime_worker.open_session(serialized(stub), names, arrays, folder, tuned)


def _node_inputs(graph: onnx.GraphProto) -> set[str]:
    """Every tensor a node of the graph or of its bodies reads."""
    names: set[str] = set()
    for n in graph.node:
        names.update(n.input)
        for a in n.attribute:
            for g in [a.g] if a.HasField("g") else list(a.graphs):
                names |= _node_inputs(g)
    return names


#: Inline initializers of at least this many bytes go to onnxruntime as OrtValues over their bytes.
HAND_OVER_ABOVE = 4096
_HANDED_OVER = "graphfix-handed-over.data"
#: Element types handed over (numpy arrays onnxruntime takes as they are).
_PLAIN = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                np.uint8, np.uint16, np.uint32, np.uint64, np.bool_)}


def _hand_over(parts) -> tuple[onnx.ModelProto, list[str], list[np.ndarray]]:
    """The model (an :class:`~graphfix.model_io.Assembled`) as one ModelProto whose big inline
    initializers are external-data stubs, their names, and their values as arrays over the
    tensors' bytes: serializing them into the session's model, and onnxruntime's copy of that,
    were two more copies of every weight per verification session."""
    from graphfix.model_io import tensor_bytes

    picked: dict[int, np.ndarray] = {}
    read = _node_inputs(parts.stub.graph)  # onnxruntime drops unread initializers, then cannot replace them
    for k, t in enumerate(parts.initializers):
        size = tensor_bytes(t)
        if is_external(t) or not t.HasField("raw_data") or size is None or size < HAND_OVER_ABOVE or t.name not in read:
            continue
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        if dtype in _PLAIN and len(t.raw_data) == size:
            picked[k] = np.frombuffer(t.raw_data, dtype=dtype).reshape(tuple(t.dims))
    stub = onnx.ModelProto()
    stub.CopyFrom(parts.stub)
    for k, t in enumerate(parts.initializers):
        if k not in picked:
            stub.graph.initializer.append(t)
            continue
        s = stub.graph.initializer.add()
        s.name, s.data_type, s.data_location = t.name, t.data_type, onnx.TensorProto.EXTERNAL
        s.dims.extend(t.dims)
        entry = s.external_data.add()
        entry.key, entry.value = "location", _HANDED_OVER
    return stub, [parts.initializers[k].name for k in picked], list(picked.values())


# ------------------------------------------------------------------------------ writing
def _nbytes(t: onnx.TensorProto) -> int | None:
    if is_external(t):
        length = info(t).get("length")
        return int(length) if length else None
    from graphfix.model_io import tensor_bytes

    return tensor_bytes(t)


class DataPlan:
    """Which initializers go to the data file, at which offsets."""

    def __init__(self, model: onnx.ModelProto, base_dir: Path | None, data_name: str) -> None:
        self.model, self.base_dir, self.data_name = model, base_dir, data_name
        self.offsets: dict[int, tuple[int, int]] = {}  # index of the initializer -> (offset, length)
        end = 0
        for k, t in enumerate(model.graph.initializer):
            n = _nbytes(t)
            if n is None or (n < EXTERNAL_ABOVE and not is_external(t)):
                continue
            if is_external(t) and base_dir is None:
                raise GraphfixError(f"tensor '{t.name}' is external data but the model's folder is unknown")
            offset = -(-end // _ALIGN) * _ALIGN
            self.offsets[k] = (offset, n)
            end = offset + n

    def write_data(self, fh: BinaryIO) -> None:
        for k, (offset, n) in self.offsets.items():
            t = self.model.graph.initializer[k]
            fh.seek(offset)
            if is_external(t):
                entry = info(t)
                with open(Path(self.base_dir) / entry["location"], "rb") as src:  # type: ignore[arg-type]
                    src.seek(int(entry.get("offset", 0) or 0))
                    left = n
                    while left:
                        chunk = src.read(min(_CHUNK, left))
                        if not chunk:
                            raise GraphfixError(f"external data of tensor '{t.name}' ends early", entry["location"])
                        fh.write(chunk)
                        left -= len(chunk)
            elif t.HasField("raw_data"):
                fh.write(t.raw_data)
            else:
                fh.write(np.ascontiguousarray(numpy_helper.to_array(t)).tobytes())
        fh.truncate()

    def stubs(self, location: str) -> Callable[[int, onnx.TensorProto], onnx.TensorProto | None]:
        """:meth:`stub` with the weights in ``location`` (the writer installs them under an interim
        name first when the data file's own name still holds the previous model's weights)."""
        return lambda k, t: self.stub(k, t, location)

    def stub(self, k: int, t: onnx.TensorProto, location: str | None = None) -> onnx.TensorProto | None:
        """The reference written in the model for initializer ``k`` (None: written as it is)."""
        if k not in self.offsets:
            return None
        offset, n = self.offsets[k]
        s = onnx.TensorProto()
        s.name, s.data_type = t.name, t.data_type
        s.dims.extend(t.dims)
        s.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location or self.data_name), ("offset", str(offset)), ("length", str(n))):
            e = s.external_data.add()
            e.key, e.value = key, value
        return s


def needs_external(model: onnx.ModelProto, requested: str | None) -> bool:
    from graphfix.model_io import estimated_size

    return requested is not None or has_external(model) or estimated_size(model) > _PROTO_LIMIT
