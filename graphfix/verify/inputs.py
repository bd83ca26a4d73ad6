"""Verification inputs: polygraphy's DataLoader for random feeds, or the user's inputs file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from polygraphy.common import TensorMetadata
from polygraphy.comparator import DataLoader
from polygraphy.logger import G_LOGGER

from graphfix.errors import GraphfixError, first_line

Feeds = list[dict[str, np.ndarray]]
#: Default value range of float inputs.
FLOAT_RANGE = (-1.0, 1.0)


@contextlib.contextmanager
def quiet_polygraphy() -> Iterator[None]:
    """Polygraphy logs every run and comparison at INFO; graphfix prints its own table."""
    with G_LOGGER.verbosity(G_LOGGER.CRITICAL):
        yield


# ------------------------------------------------------------------ inputs
def input_metadata(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]] | None = None) -> TensorMetadata:
    """Graph inputs (not initializers) with dynamic dims taken from ``shapes`` or set to 1."""
    shapes = dict(shapes or {})
    inits = {i.name for i in model.graph.initializer}
    meta = TensorMetadata()
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if vi.name in shapes:
            given = shapes.pop(vi.name)
            if len(given) != len(dims) or any(d is not None and d != g for d, g in zip(dims, given, strict=False)):
                raise GraphfixError(f"--input-shapes {vi.name}:{'x'.join(map(str, given))} does not fit the input's shape {_dims_str(dims)}")
            dims = list(given)
        meta.add(vi.name, dtype, tuple(1 if d is None else d for d in dims))
    if shapes:
        raise GraphfixError(f"--input-shapes names unknown inputs: {', '.join(shapes)} (inputs: {', '.join(meta.keys())})")
    return meta


def check_val_range(meta: TensorMetadata, val_range: dict[str, tuple[float, float]] | None) -> None:
    unknown = set(val_range or {}) - set(meta.keys())
    if unknown:
        raise GraphfixError(f"--val-range names unknown inputs: {', '.join(sorted(unknown))}")


def _dims_str(dims: list[int | None]) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


def make_inputs(
    model: onnx.ModelProto,
    shapes: dict[str, tuple[int, ...]] | None = None,
    val_range: dict[str, tuple[float, float]] | None = None,
    seed: int = 1,
    iterations: int = 1,
) -> Feeds:
    """Deterministic random feeds, one dict per iteration (polygraphy DataLoader).

    Floats default to [-1, 1] rather than polygraphy's [0, 1]: negative values are what expose a
    wrong rewrite of sign-sensitive ops (Clip, Max/Min, Relu, Abs). Integers keep [0, 1].
    """
    meta = input_metadata(model, shapes)
    check_val_range(meta, val_range)
    floats = {vi.name for vi in model.graph.input if onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).kind == "f"}
    ranges = {name: FLOAT_RANGE for name in meta if name in floats}
    ranges.update(val_range or {})
    with quiet_polygraphy():
        loader = DataLoader(seed=seed, iterations=iterations, input_metadata=meta, val_range=ranges or None)
        return [dict(feed) for feed in loader]


def load_inputs(path: str, model: onnx.ModelProto) -> Feeds:
    """``.npz`` (one iteration) or polygraphy's JSON (``polygraphy run --save-inputs``)."""
    p = Path(path)
    if not p.exists():
        raise GraphfixError("no such file", path)
    try:
        if p.suffix == ".npz":
            with np.load(p) as data:
                feeds = [{k: data[k] for k in data.files}]
        else:
            from polygraphy.json import load_json

            feeds = [dict(f) for f in load_json(str(p))]
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's file
        raise GraphfixError(f"cannot read inputs ({first_line(exc)})", path) from exc
    expected = set(input_metadata(model).keys())
    for feed in feeds:
        if set(feed) != expected:
            raise GraphfixError(f"inputs name {sorted(feed)}, the model needs {sorted(expected)}", path)
    return feeds


def nudged_feeds(feeds: Feeds) -> Feeds:
    """Every float input moved by one ulp (how much the model amplifies rounding: :func:`noise_floor`)."""
    return [{k: _nudged(v) for k, v in feed.items()} for feed in feeds]


def _nudged(value: np.ndarray) -> np.ndarray:
    value = np.asarray(value)
    return np.nextafter(value, np.inf).astype(value.dtype) if value.dtype.kind == "f" else value
