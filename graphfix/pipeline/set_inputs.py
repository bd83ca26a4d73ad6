"""``--set-input NAME=VALUE``: freeze a graph input to a constant, fold what follows from it and
inline the Ifs it decides.

Exports keep switches as inputs that deployments never change: optimum's merged decoders choose
their decoder with ``use_cache_branch``, voice-activity detectors exported through TorchScript
choose a branch on the sample rate. TensorRT then builds both branches as a runtime
IIfConditional (importer source 8.5-GA/10.1-GA: only a condition that is weights selects one
branch), whose outputs must agree in shape ("IIfConditionalOutputLayer inputs must have the same
shape"). Freezing the switch and folding removes the If at its source, as ``--fix-shapes`` does
for dims.

The specialised model is verified against the original with the input made an initializer of
that value (the original fed that value, by construction) like a pass
(:func:`graphfix.pipeline.steps._whole_model_step`); the written model's metadata
(``graphfix.set_inputs``) and the report say what it was specialised to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from graphfix.errors import GraphfixError
from graphfix.graph.convert import to_graph, to_model
from graphfix.onnxio.proto import all_nodes
from graphfix.passes import if_inline
from graphfix.pipeline.fix_shapes import FOLD_LIMIT

#: The metadata_props key the specialised values are written under (JSON: name -> value).
METADATA_KEY = "graphfix.set_inputs"
#: Most elements a frozen input may hold (a switch or a small table, not a weight).
MAX_ELEMENTS = 1 << 16


def values(model: onnx.ModelProto, given: Mapping[str, Any], where: str | None = None) -> dict[str, np.ndarray]:
    """Each given value as an array of its input's type and shape; refused (one line naming
    ``where``, the model's file) for a name that is not an input, a value of another type or
    shape, or an input nothing reads."""
    if not given:  # the common case: no walk over every node's inputs (0.15 s at 100k nodes)
        return {}
    try:
        return _values(model, given)
    except GraphfixError as exc:
        raise GraphfixError(str(exc), where) from None


def _values(model: onnx.ModelProto, given: Mapping[str, Any]) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    read = {name for n in all_nodes(model.graph) for name in n.input} | {o.name for o in model.graph.output}
    out: dict[str, np.ndarray] = {}
    for name, value in given.items():
        vi = inputs.get(name)
        if vi is None:
            raise GraphfixError(f"--set-input names unknown input {name!r} (inputs: {', '.join(inputs) or 'none'})")
        if name not in read:
            raise GraphfixError(f"--set-input {name}: nothing in the model reads this input, so freezing it has no effect")
        out[name] = _typed(name, value, vi)
    return out


def _typed(name: str, value: Any, vi: onnx.ValueInfoProto) -> np.ndarray:
    if vi.type.WhichOneof("value") != "tensor_type":
        raise GraphfixError(f"--set-input {name}: the input is not a tensor")
    tt = vi.type.tensor_type
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except (KeyError, TypeError, ValueError):
        raise GraphfixError(f"--set-input {name}: the input's type cannot be given a value") from None
    raw = np.asarray(_parsed(name, value) if isinstance(value, str) else value)
    if raw.dtype.kind not in "biuf" or raw.size > MAX_ELEMENTS:
        raise GraphfixError(f"--set-input {name}={_shown(value)}: expected at most {MAX_ELEMENTS} numbers")
    if not _fits(raw, dtype):
        raise GraphfixError(f"--set-input {name}={_shown(value)}: not a value of the input's type {dtype}")
    array = raw.astype(dtype)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
    if dims is not None and array.ndim != len(dims) and array.size == 1 and all(d == 1 for d in dims):
        array = array.reshape([1] * len(dims))  # a scalar for a [1] input
    if dims is not None and (array.ndim != len(dims) or any(d is not None and d != s for d, s in zip(dims, array.shape, strict=True))):
        want = "x".join("?" if d is None else str(d) for d in dims) or "a scalar"
        got = "x".join(map(str, array.shape)) or "a scalar"
        raise GraphfixError(f"--set-input {name}={_shown(value)}: the value is {got}, the input is {want}")
    return array


def _parsed(name: str, text: str) -> Any:
    """``16000``, ``0.5``, ``true``/``false``, ``[1, 2, 3]`` (JSON numbers and lists)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return json.loads(text)
    except ValueError:
        raise GraphfixError(f"--set-input {name}={_shown(text)}: expected a number, true/false or a list like [1,2]") from None


def _fits(raw: np.ndarray, dtype: np.dtype) -> bool:
    """The value is one of the type's: integers for an integer input (1.0 is, 1.5 is not), 0/1 for a bool."""
    if dtype.kind == "b":
        return raw.dtype.kind == "b" or (raw.dtype.kind in "iuf" and bool(np.all((raw == 0) | (raw == 1))))
    if dtype.kind in "iu":
        if raw.dtype.kind == "f" and not np.all(np.isfinite(raw) & (raw == np.round(raw))):
            return False
        info = np.iinfo(dtype)
        return raw.size == 0 or (raw.min() >= info.min and raw.max() <= info.max)
    return True


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def describe(frozen: Mapping[str, np.ndarray]) -> str:
    """``sr=16000, use_cache_branch=false`` (what the report says)."""
    return ", ".join(f"{k}={json.dumps(v.tolist())}" for k, v in frozen.items())


def pinned(model: onnx.ModelProto, frozen: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """The model with each frozen input an initializer of its value, nothing else changed: what
    the original computes when fed those values (the reference the specialised model is verified
    against)."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    keep = [vi for vi in work.graph.input if vi.name not in frozen]
    del work.graph.input[:]
    work.graph.input.extend(keep)
    work.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in frozen.items())
    return work


def _fold(graph: gs.Graph) -> None:
    """onnx-graphsurgeon's folding (evaluated by onnxruntime, shapes included), Ifs left to
    if-inline: its ``flatten_subgraphs`` renames every tensor of the branch it keeps."""
    graph.fold_constants(fold_shapes=True, size_threshold=FOLD_LIMIT, error_ok=True, flatten_subgraphs=False) \
        .cleanup(remove_unused_graph_inputs=False)


def specialise(model: onnx.ModelProto, frozen: Mapping[str, np.ndarray]) -> tuple[onnx.ModelProto, onnx.ModelProto, int]:
    """(the pinned model, the specialised one, how many nodes went): what follows from the frozen
    values folded (onnx-graphsurgeon's ``fold_constants``, evaluated by onnxruntime, shapes
    included), the Ifs they decide inlined (if-inline's rewrite); the values in the metadata."""
    work = pinned(model, frozen)
    del work.graph.value_info[:]  # the import infers them again, with the values known
    graph = to_graph(work)
    before = sum(1 for _ in all_nodes(work.graph))
    _fold(graph)
    if if_inline.PASS.run_on_graph(graph, force=True)[1]:  # every If whose condition now folds, nested ones too
        _fold(graph)  # what the inlined branches compute from the values
    specialised = to_model(graph, work)
    recorded = {k: v.tolist() for k, v in frozen.items()}
    for prop in work.metadata_props:
        if prop.key == METADATA_KEY:
            recorded = {**json.loads(prop.value), **recorded}
    for m in (work, specialised):
        kept = [p for p in m.metadata_props if p.key != METADATA_KEY]
        del m.metadata_props[:]
        m.metadata_props.extend(kept)
        m.metadata_props.add(key=METADATA_KEY, value=json.dumps(recorded))
    return work, specialised, before - sum(1 for _ in all_nodes(specialised.graph))
