"""Atomic writes of a model with its weights streamed, inline or as external data.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from graphfix.fs import transaction as transaction_mod
from graphfix.fs.transaction import write_atomic
from graphfix.onnxio import external as external_mod
from graphfix.onnxio import paths
from graphfix.onnxio.ir import runtime_compatible
from graphfix.onnxio.proto import PROTO_LIMIT, Assembled, write_streamed


def save_model(model: onnx.ModelProto | Assembled, path: str | os.PathLike, base_dir: str | os.PathLike | None = None,
               external_data: str | None = None) -> str | None:
    """Write with an IR version onnxruntime reads, atomically, streaming the weights.

    A model that references external data (``base_dir``: the folder its locations are relative
    to), is over 2 GiB, or is given an ``external_data`` name is written as two files: the model,
    and its weights in ``<output>.data`` (or ``external_data``, relative to the output's folder).
    Returns the data file's path when one was written.
    """

    if isinstance(model, Assembled):
        inline = external_data is None and not external_mod.has_external(model)
        if inline and model.size() <= PROTO_LIMIT:
            parts = model.compatible()
            write_atomic(path, lambda fh: write_streamed(parts, fh))
            return None
        model = model.proto()
    model = runtime_compatible(model)
    if not external_mod.needs_external(model, external_data):
        write_atomic(path, lambda fh: write_streamed(model, fh))
        return None
    data = paths.data_path(path, external_data)
    plan = external_mod.DataPlan(model, None if base_dir is None else Path(base_dir),
                             os.path.relpath(data, Path(path).parent))

    def naming(location: str) -> transaction_mod.Data:  # the model with its weights in ``location``
        return lambda fh: write_streamed(model, fh, plan.stubs(location))

    with transaction_mod.transaction() as tx:
        weights = tx.stage(data, plan.write_data, "external data")
        tx.stage(path, naming(plan.data_name), data_file=weights, naming=naming)
    return str(data)
