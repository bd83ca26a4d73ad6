"""onnxruntime sessions for a model in the worker: big weights handed over by shared memory,
not serialized again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from graphfix.errors import GraphfixError
from graphfix.onnxio.external import has_external, is_external
from graphfix.onnxio.proto import Assembled, serialized, tensor_bytes
from graphfix.runtime import worker as runtime_worker


def session(model, base_dir: Path | str | None, tuned: bool = True):
    """An onnxruntime CPU session in graphfix's worker process (:mod:`graphfix.runtime.worker`:
    a crash or an endless run cannot take graphfix down); external data is read from ``base_dir``
    by onnxruntime itself, and big inline initializers cross to it once, through shared memory,
    and are handed over as OrtValues over those bytes (see :func:`_hand_over`), so the session
    gets no serialized copy of the weights.

    Tuned for the few runs verification makes, on graphs of any size: graph optimizations off
    (both sides run the graph's own ops; on a 100k-node export creating the session took 34.7 s
    with them, 10.8 s without) and no memory pattern (planned during the first run: 33.7 s for
    that run, 0.18 s without). ``tuned=False``: onnxruntime's defaults, for the models those
    settings cannot run (see :func:`graphfix.verify.sessions.run`)."""

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
    """The model (an :class:`~graphfix.onnxio.load.Assembled`) as one ModelProto whose big inline
    initializers are external-data stubs, their names, and their values as arrays over the
    tensors' bytes: serializing them into the session's model, and onnxruntime's copy of that,
    were two more copies of every weight per verification session."""

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
