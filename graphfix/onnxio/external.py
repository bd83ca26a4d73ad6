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
from graphfix.fs.transaction import COPY_CHUNK
from graphfix.onnxio.proto import PROTO_LIMIT, estimated_size, initializers, tensor_bytes

#: External tensors up to this many bytes are read in at load (passes may fold small constants).
LOAD_SMALL_BELOW = 1 << 20
#: When writing external data, tensors of at least this many bytes go to the data file.
EXTERNAL_ABOVE = 1024
#: Offsets in the data file are aligned like onnx's own writer (page size, for mmap).
_ALIGN = 4096


def is_external(t: onnx.TensorProto) -> bool:
    return t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL


def info(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def has_external(model) -> bool:
    """Whether any initializer of the model (a ModelProto or an Assembled one) is external data."""

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


# ------------------------------------------------------------------------------ writing
def _nbytes(t: onnx.TensorProto) -> int | None:
    if is_external(t):
        length = info(t).get("length")
        return int(length) if length else None

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
                        chunk = src.read(min(COPY_CHUNK, left))
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

    return requested is not None or has_external(model) or estimated_size(model) > PROTO_LIMIT
