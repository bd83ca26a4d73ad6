"""Reading a model: the file checked before parsing, small external data loaded, then validated;
every failure is a GraphfixError naming the file.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from graphfix.errors import GraphfixError, first_line
from graphfix.onnxio import external as external_mod
from graphfix.onnxio.paths import read_plan
from graphfix.onnxio.validate import check_graph


def load_model(path: str | os.PathLike, checker: bool = True,
               early: Callable[[onnx.ModelProto], None] | None = None) -> onnx.ModelProto:
    """Read and structurally check a model; every failure is a GraphfixError naming the file.
    ``checker`` and ``early``: as :func:`~graphfix.onnxio.validate.check_graph`'s."""
    p = Path(path)
    if not p.exists():
        raise GraphfixError("no such file", str(p))
    if p.is_dir():
        raise GraphfixError("is a directory, not an ONNX file", str(p))
    _check_source(p)
    try:
        model = _parse(p)
        external_mod.load_small(model, p.parent)
    except (DecodeError, RuntimeError, ValueError, OSError, onnx.checker.ValidationError) as exc:
        raise GraphfixError(f"not a readable ONNX model ({first_line(exc)})", str(p)) from exc
    if not model.graph.node and not model.graph.output:
        raise GraphfixError("not an ONNX model (no graph, no outputs)", str(p))
    check_graph(model, str(p), checker, early)
    return model


def _parse(p: Path) -> onnx.ModelProto:
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


def _check_source(p: Path) -> None:
    """Before reading: a regular file protobuf can parse, external data inside its folder."""

    read_plan(p)
