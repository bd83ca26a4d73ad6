"""int-argmax-topk: ArgMax/ArgMin/TopK on INT32/INT64 data computed in FLOAT, when that is exact.

Why: every parser before 8.6 rejects integer data for the TopK layer ArgMax/ArgMin/TopK import
as, and INT64 tensors are INT32 inside TensorRT: "This version of TensorRT does not support INT32
ArgMin/ArgMax input data." (argMinMaxHelper, 8.0-8.4), "This version of TensorRT does not support
INT32 input for the TopK operator." (importTopK 8.2-8.4), "Found invalid input type of INT32"
(notInvalidType, 8.5); a bare kINT32 assert in 5.1-7.2. 8.6 casts INT32 to FLOAT itself (with a
"rounding errors may occur" warning). Exports produce it for CLIP's text pooling
(``input_ids.argmax(-1)`` or ``(input_ids == eos).int().argmax(-1)``), detectors selecting
queries by integer votes, and reduce-axes-input's TopK for an integer ReduceMax over long axes.

Rewrite: ``Cast(x, FLOAT)``, the same op with the same attributes, and for TopK the values cast
back to the input type; the indices are the op's own. Exact when every value has
``|v| <= 2^24``: FLOAT then holds each value exactly, so the order and every equality are kept,
and with them ArgMax's ``select_last_index`` and TopK's lower-index-first tie order.

The bound is proven from the graph in one memoised walk (linear): constants; Cast of BOOL (and
comparisons); narrow integer types; ArgMax/TopK indices and Shape values over static dims; Range
between bounded ends; values that also index a Gather along a static axis (token ids into an
embedding table of V rows lie in [-V, V-1], or onnxruntime and the spec reject the model); and the
value-preserving and arithmetic ops between those (Reshape, Slice, Gather data, Concat, Where,
Max/Min, Add/Sub/Mul, ReduceSum over static dims, ...). Without a proof the node stays, with a
finding that says what to do.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Folder, replace_tensor, tensor_dtype
from graphfix.passes.base import TYPE, Context, Pass, Rule, Skip

OPS = frozenset({"ArgMax", "ArgMin", "TopK"})
#: Largest magnitude FLOAT holds every integer up to.
EXACT = 1 << 24
_INTS = (np.dtype(np.int32), np.dtype(np.int64))
#: Ops whose output values are values of input 0 (or of every data input, for the second group).
_SAME_VALUES = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Expand", "Tile",
                          "Slice", "Gather", "GatherElements", "GatherND", "ReduceMax", "ReduceMin", "Neg", "Abs",
                          "Relu", "DepthToSpace", "SpaceToDepth", "Split"})
_ANY_INPUT = frozenset({"Concat", "Max", "Min"})
_BOOL_OUT = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor",
                       "IsNaN", "IsInf"})
#: How deep the walk follows producers (exports reach integer sources within a few dozen nodes).
_DEPTH = 64


def _int_data(node: gs.Node, ctx: Context) -> bool:
    return bool(node.inputs) and tensor_dtype(node.inputs[0]) in _INTS


def _static(d: object) -> bool:
    return isinstance(d, int | np.integer) and int(d) >= 0


def _axis_len(t: gs.Tensor, axis: int) -> int | None:
    if t.shape is None or not t.shape:
        return None
    d = t.shape[axis % len(t.shape)]
    return int(d) if _static(d) else None


class Bounds:
    """``bound(t)``: a proven upper bound on ``|v|`` over the values of integer tensor ``t``, or None."""

    def __init__(self, folder: Folder) -> None:
        self.folder = folder
        self._memo: dict[int, tuple[gs.Tensor, int | None]] = {}

    def bound(self, t: gs.Tensor, depth: int = 0) -> int | None:
        key = id(t)
        if key in self._memo:
            return self._memo[key][1]
        if depth > _DEPTH:
            return None
        self._memo[key] = (t, None)  # cycles (none in a valid graph) and re-entry stay unproven
        found = [b for b in (self._from_type(t), self._from_value(t), self._from_producer(t, depth),
                             self._from_indexing(t)) if b is not None]
        result = min(found) if found else None
        self._memo[key] = (t, result)
        return result

    def _from_type(self, t: gs.Tensor) -> int | None:
        dtype = tensor_dtype(t)
        if dtype == np.bool_:
            return 1
        if dtype is not None and dtype.kind in "iu" and dtype.itemsize <= 2:
            info = np.iinfo(dtype)
            return max(abs(int(info.min)), int(info.max))
        return None

    def _from_value(self, t: gs.Tensor) -> int | None:
        value = self.folder.value(t)
        if value is None or value.dtype.kind not in "biu":
            return None
        return int(np.abs(value.astype(np.int64)).max(initial=0))

    def _from_producer(self, t: gs.Tensor, depth: int) -> int | None:
        node = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
        if node is None:
            return None
        op, ins = node.op, node.inputs
        nxt = depth + 1
        if op in _BOOL_OUT:
            return 1
        if op == "Cast":
            src = tensor_dtype(ins[0])
            if src is not None and src.kind == "f":
                return None  # float -> int truncates values we know nothing about
            return self.bound(ins[0], nxt)
        if op in _SAME_VALUES:
            return self.bound(ins[0], nxt) if ins else None
        if op in _ANY_INPUT or op == "Where":
            data = ins[1:] if op == "Where" else ins
            parts = [self.bound(i, nxt) for i in data if i.name]
            return max(parts) if parts and None not in parts else None  # type: ignore[type-var]
        if op in ("Add", "Sub", "Mul"):
            a, b = (self.bound(i, nxt) for i in ins[:2])
            if a is None or b is None:
                return None
            return a * b if op == "Mul" else a + b
        if op in ("ArgMax", "ArgMin") or (op == "TopK" and len(node.outputs) > 1 and t is node.outputs[1]):
            n = _axis_len(ins[0], int(node.attrs.get("axis", -1 if op == "TopK" else 0)))
            return n if n is not None else None
        if op == "TopK":
            return self.bound(ins[0], nxt)
        if op == "Shape" and ins[0].shape is not None and all(_static(d) for d in ins[0].shape):
            return max((int(d) for d in ins[0].shape), default=0)
        if op == "Size" and ins[0].shape is not None and all(_static(d) for d in ins[0].shape):
            return int(np.prod([int(d) for d in ins[0].shape], dtype=np.int64))
        if op == "Range":
            ends = [self.bound(i, nxt) for i in ins[:2]]
            return None if None in ends else max(ends)  # type: ignore[type-var]
        if op == "ReduceSum":
            return self._reduce_sum(node, ins, nxt)
        return None

    def _reduce_sum(self, node: gs.Node, ins: list[gs.Tensor], depth: int) -> int | None:
        """|sum| <= bound * (number of summed elements), over static dims only."""
        x = ins[0]
        b = self.bound(x, depth)
        if b is None or x.shape is None:
            return None
        axes_v = self.folder.value(ins[1]) if len(ins) > 1 and ins[1].name else node.attrs.get("axes")
        rank = len(x.shape)
        axes = range(rank) if axes_v is None or np.asarray(axes_v).size == 0 else {int(a) % rank for a in np.asarray(axes_v).reshape(-1)}
        if len(ins) > 1 and ins[1].name and axes_v is None:
            return None  # runtime axes
        dims = [x.shape[a] for a in axes]
        return b * int(np.prod([int(d) for d in dims], dtype=np.int64)) if all(_static(d) for d in dims) else None

    def _from_indexing(self, t: gs.Tensor) -> int | None:
        """Values that also index a Gather along a static axis lie in [-n, n-1] (through reshapes)."""
        seen, todo, best = set(), [t], None
        while todo:
            cur = todo.pop()
            if id(cur) in seen or len(seen) > _DEPTH:
                continue
            seen.add(id(cur))
            for consumer in cur.outputs:
                if consumer.op == "Gather" and len(consumer.inputs) > 1 and consumer.inputs[1] is cur:
                    n = _axis_len(consumer.inputs[0], int(consumer.attrs.get("axis", 0)))
                    if n is not None:
                        best = n if best is None else min(best, n)
                elif consumer.op in ("Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten") and consumer.inputs[0] is cur:
                    todo.extend(consumer.outputs)
        return best


def _bounds(ctx: Context) -> Bounds:
    return ctx.memo("int_bounds", Bounds)


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    dtype = tensor_dtype(x)
    bound = _bounds(ctx).bound(x)
    if bound is None or bound > EXACT:
        shown = "unknown" if bound is None else f"up to {bound}"
        raise Skip(f"{node.op} on {str(dtype).upper()} data: its values ({shown}) are not provably within +-2^24, so a "
                   "FLOAT cast may merge distinct values and change the result; cast to float in the export where "
                   "the values are known to be small (ids, counts), compare in float upstream, or target TensorRT "
                   ">= 8.6 (which casts INT32 to FLOAT itself, with the same limit)")
    b = ctx.builder
    xf = b.cast(x, np.float32)
    if node.op == "TopK":
        values, indices = b.op("TopK", [xf, *node.inputs[1:]], dict(node.attrs), outputs=2)
        values.dtype, indices.dtype = np.dtype(np.float32), np.dtype(np.int64)
        replace_tensor(ctx.graph, node.outputs[0], b.cast(values, dtype))
        replace_tensor(ctx.graph, node.outputs[1], indices)
    else:
        replace_tensor(ctx.graph, node.outputs[0], b.op(node.op, [xf], dict(node.attrs), dtype=np.int64))


PASS = Pass(
    name="int-argmax-topk",
    order=66,
    summary="Compute ArgMax/ArgMin/TopK on INT32/INT64 data in FLOAT when the values are provably exact (|v| <= 2^24).",
    ops=OPS,
    rules=(
        Rule(TYPE, "<8.6", "ArgMax/ArgMin/TopK on INT32/INT64 data (INT64 is cast down to INT32): the TopK layer takes "
             "no INT32 input before 8.6", _int_data,
             evidence="importer source: argMinMaxHelper 'This version of TensorRT does not support INT32 ArgMin/ArgMax "
             "input data.' (onnx2trt_utils.cpp 8.0-GA-8.4-GA; kINT32 assert 5.1-7.2.1), importTopK 'does not support "
             "INT32 input for the TopK operator.' (builtin_op_importers.cpp 8.2-GA/8.4-GA), notInvalidType INT32 "
             "(8.5-GA); 8.6-GA casts INT32 to FLOAT"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
