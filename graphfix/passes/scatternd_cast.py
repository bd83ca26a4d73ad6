"""scatternd-cast: ScatterND in a type TensorRT takes, and without a ``reduction`` attribute.

Why: in-place index assignment (``x[idx] = y``, KV-cache updates, ``index_put_``) exports to
ScatterND. TensorRT's ScatterND (8.2+) takes FP32/FP16/INT8/INT32 data (INT64 and BF16 from 9.0);
older plugin paths take only INT32/float, and "IScatterLayer input and updates must have
identical types" when a cast upstream disagrees. The ``reduction`` attribute (opset 16+) is
silently ignored by parsers before 10 (plain overwrite: wrong results) and rejected by 10.x
("Attribute reduction is not supported"), 10.0-10.8 even when it says "none".

Rewrite:
* data of another type (BOOL, INT8/16, UINT8, INT64 before 9.0, DOUBLE) is Cast with its updates
  to INT32 (integers, BOOL) or FLOAT (DOUBLE), scattered, and Cast back, so the graph's types
  are unchanged. BOOL and small integers round-trip exactly; INT64 and DOUBLE are narrowed the
  way TensorRT < 9.0 narrows them anyway (verification flags values that do not fit).
* ``reduction="none"`` is dropped. ``add``/``mul``/``max``/``min`` with constant indices become
  ``ScatterND(data, idx, op(GatherND(data, idx), updates))`` after combining the updates of
  duplicate indices (so each index is written once): exact. Reductions with runtime indices
  belong to scatternd-decompose (earlier in the pipeline, a one-hot grid), so this pass does not
  claim them.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import LIMIT, TYPE, WRONG_RESULTS, Context, Pass, Rule
from graphfix.trt.versions import TrtVersion

_BASE_TYPES = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32)}
_REDUCE = {"add": ("Add", "ReduceSum"), "mul": ("Mul", "ReduceProd"), "max": ("Max", "ReduceMax"), "min": ("Min", "ReduceMin")}
#: Index groups with duplicates handled one by one; more than this is left as a finding.
MAX_DUPLICATE_GROUPS = 64


def supported_types(trt: TrtVersion | None) -> set[np.dtype]:
    """Data types the target's ScatterND takes (conservative without a target)."""
    if trt is not None and trt >= TrtVersion("9.0"):
        return _BASE_TYPES | {np.dtype(np.int64)}
    return _BASE_TYPES


def _odd_type(node: gs.Node, ctx: Context) -> bool:
    dtype = tensor_dtype(node.inputs[0])
    return dtype is not None and dtype not in _BASE_TYPES | {np.dtype(np.int64)}


def _int64(node: gs.Node, ctx: Context) -> bool:
    return tensor_dtype(node.inputs[0]) == np.int64


def _reduction(node: gs.Node, ctx: Context) -> bool:
    """A reduction with constant indices (runtime ones are scatternd-decompose's)."""
    return node.attrs.get("reduction", "none") != "none" and ctx.folder.value(node.inputs[1]) is not None


def _explicit_none(node: gs.Node, ctx: Context) -> bool:
    return node.attrs.get("reduction") == "none"


def rewrite(node: gs.Node, ctx: Context) -> None:
    b = ctx.builder
    data, indices, updates = node.inputs
    reduction = node.attrs.get("reduction", "none")
    if reduction != "none":
        combined = _reduced_updates(b, node, ctx)
        indices, updates = combined
    dtype = tensor_dtype(data)
    wide = dtype is not None and dtype not in supported_types(ctx.trt)
    if wide:
        work = np.dtype(np.float32) if dtype.kind == "f" else np.dtype(np.int32)
        data, updates = b.cast(data, work), b.cast(updates, work)
    if reduction != "none":
        op = _REDUCE[reduction][0]
        updates = b.op(op, [b.op("GatherND", [data, indices]), updates])
    out = b.op("ScatterND", [data, indices, updates])
    replace_tensor(ctx.graph, node.outputs[0], b.cast(out, dtype) if wide else out)


def _reduced_updates(b: Builder, node: gs.Node, ctx: Context) -> tuple[gs.Tensor, gs.Tensor]:
    """Unique constant indices and the updates combined per index (duplicates reduced first)."""
    reduction = node.attrs["reduction"]
    if reduction not in _REDUCE:
        raise Skip(f"reduction={reduction!r} is not one graphfix can rewrite")
    idx = ctx.folder.value(node.inputs[1])
    if idx is None:
        raise Skip(
            f"reduction={reduction!r} with runtime indices: duplicates cannot be ruled out, so no exact rewrite here "
            "(scatternd-decompose rewrites it); TensorRT < 10 ignores the reduction (wrong results) and 10.x rejects it"
        )
    q = idx.shape[-1]
    rows = idx.reshape(-1, q)
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for r, key in enumerate(map(tuple, rows.tolist())):
        groups[key].append(r)
    if len(groups) == len(rows):
        return b.const(idx.astype(np.int64), hint="indices"), node.inputs[2]
    duplicated = [g for g in groups.values() if len(g) > 1]
    if len(duplicated) > MAX_DUPLICATE_GROUPS:
        raise Skip(f"{len(duplicated)} duplicated indices: too many to combine (limit {MAX_DUPLICATE_GROUPS})")
    data, updates = node.inputs[0], node.inputs[2]
    slice_shape = b.slice(b.shape(data), [q], [np.iinfo(np.int64).max], axes=[0])
    flat = b.reshape(updates, b.concat([np.array([-1], np.int64), slice_shape], 0))
    singles = [g[0] for g in groups.values() if len(g) == 1]
    parts = [b.op("Gather", [flat, np.array(singles, np.int64)], {"axis": 0})] if singles else []
    for g in duplicated:
        picked = b.op("Gather", [flat, np.array(g, np.int64)], {"axis": 0})
        parts.append(b.reduce(_REDUCE[reduction][1], picked, [0], keepdims=True))
    keys = [k for k, g in groups.items() if len(g) == 1] + [k for k, g in groups.items() if len(g) > 1]
    return b.const(np.array(keys, np.int64).reshape(-1, q), hint="indices"), b.concat(parts, 0)


PASS = Pass(
    name="scatternd-cast",
    summary="Cast ScatterND data/updates to a type TensorRT takes; rewrite or report the reduction attribute.",
    ops=frozenset({"ScatterND"}),
    rules=(
        Rule(TYPE, ">=8.2", "ScatterND data of a type TensorRT's scatter layer does not take (BOOL, INT8, DOUBLE, ...)", _odd_type,
             error="scatter-updates-dtype-mismatch", evidence="operator table types"),
        Rule(TYPE, ">=8.2,<9.0", "INT64 ScatterND data (INT64 from 9.0)", _int64, error="scatter-updates-dtype-mismatch",
             evidence="operator table types"),
        Rule(WRONG_RESULTS, ">=8.2,<10.0", "reduction attribute silently ignored (plain overwrite)", _reduction,
             error="scatternd-reduction-attribute", evidence="importer source 8.2/8.6/9.3"),
        Rule(LIMIT, ">=10.0", "reduction attribute rejected", _reduction, error="scatternd-reduction-attribute",
             evidence="importer source 10.1"),
        Rule(LIMIT, ">=10.0,<10.9", "an explicit reduction='none' is rejected too", _explicit_none,
             error="scatternd-reduction-attribute", evidence="importer source 10.1"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
