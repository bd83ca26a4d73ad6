"""Parsing a model file, once a run: planning a model with external data parses it (to check
where its tensors live) and keeps the model for load_model, which would parse the same bytes again.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

#: The model planning parsed last, with the identity of its file then (device, inode, size,
#: modification time): one model at most, handed over once.
_KEPT: list[tuple[tuple[int, int, int, int], Path, onnx.ModelProto]] = []


def parse(p: Path) -> onnx.ModelProto:
    """``onnx.load(p, load_external_data=False)``; a protobuf file is parsed from a memory map of
    it, not from a bytes copy read first: 0.52 s -> 0.30 s for the 400 MB bench/scale.py export
    (protobuf copies what it keeps out of the map, which is closed when the parse returns)."""
    if (onnx.serialization.registry.get_format_from_file_extension(p.suffix) or "protobuf") != "protobuf":
        return onnx.load(str(p), load_external_data=False)  # a text format, chosen by its extension
    with open(p, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if not size:
            return onnx.load(str(p), load_external_data=False)  # nothing to map
        model = onnx.ModelProto()
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
            decoded = model.ParseFromString(view)
    if decoded is not None and decoded != size:  # as onnx.load says it
        raise DecodeError(f"Protobuf decoding consumed too few bytes: {decoded} out of {size}")
    return model


def parse_for_plan(p: Path) -> onnx.ModelProto:
    """:func:`parse`, the model kept for :func:`planned` (the file's own identity noted first: a
    file changed meanwhile is parsed again)."""
    _KEPT.clear()
    identity = _identity(p)
    model = parse(p)
    _KEPT.append((identity, p, model))
    return model


def planned(p: Path) -> onnx.ModelProto | None:
    """The model :func:`parse_for_plan` kept for ``p``, if the file has not changed since (once)."""
    if not _KEPT:
        return None
    identity, path, model = _KEPT.pop()
    try:
        same = path == p and _identity(p) == identity
    except OSError:
        return None
    return model if same else None


def _identity(p: Path) -> tuple[int, int, int, int]:
    st = os.stat(p)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
