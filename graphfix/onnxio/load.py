"""Reading a model: the file checked before parsing, small external data loaded, then validated;
every failure is a GraphfixError naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from graphfix.errors import GraphfixError, first_line
from graphfix.onnxio import external as external_mod
from graphfix.onnxio import parse
from graphfix.onnxio.collector import collector_off
from graphfix.onnxio.paths import read_plan
from graphfix.onnxio.validate import Accepted, check_graph


def load_model(path: str | os.PathLike, checker: bool = True,
               early: Callable[[onnx.ModelProto], None] | None = None) -> onnx.ModelProto:
    """Read and structurally check a model; every failure is a GraphfixError naming the file.
    ``checker`` and ``early``: as :func:`~graphfix.onnxio.validate.check_graph`'s. Declared dims
    of -1 or 0 come back cleared (:func:`load_working` also says which they were)."""
    return load_working(path, checker, early)[0]


def load_working(path: str | os.PathLike, checker: bool = True,
                 early: Callable[[onnx.ModelProto], None] | None = None) -> tuple[onnx.ModelProto, Accepted]:
    """:func:`load_model`, and what it accepted that onnx's tools alone trip on: the declared dims
    of -1 or 0 it cleared (for the written model) and the notes for the report."""
    p = Path(path)
    if not p.exists():
        raise GraphfixError("no such file", str(p))
    if p.is_dir():
        raise GraphfixError("is a directory, not an ONNX file", str(p))
    _check_source(p)
    try:
        model = parse.planned(p) or parse.parse(p)
        external_mod.load_small(model, p.parent)
    except (DecodeError, RuntimeError, ValueError, OSError, onnx.checker.ValidationError) as exc:
        raise GraphfixError(f"not a readable ONNX model ({first_line(exc)})", str(p)) from exc
    if not model.graph.node and not model.graph.output:
        raise GraphfixError("not an ONNX model (no graph, no outputs)", str(p))
    with collector_off():  # the walk makes a Python object per node, attribute and tensor, keeps none
        accepted = check_graph(model, str(p), checker, early)
    return model, accepted


def _check_source(p: Path) -> None:
    """Before reading: a regular file protobuf can parse, external data inside its folder."""

    read_plan(p)
