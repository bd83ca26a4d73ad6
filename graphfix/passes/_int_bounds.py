"""A proven bound on the magnitude of an integer tensor's values (one memoised walk), for the
passes that must know integers fit FLOAT exactly (int-argmax-topk) or how large a runtime K can
be (topk-constant-k). Here so that no pass module imports another."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.fold import Folder
from graphfix.graph import tensor_dtype

#: Ops whose output values are values of input 0 (or of every data input, for the second group).
_SAME_VALUES = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Expand", "Tile",
                          "Slice", "Gather", "GatherElements", "GatherND", "ReduceMax", "ReduceMin", "Neg", "Abs",
                          "Relu", "DepthToSpace", "SpaceToDepth", "Split"})
_ANY_INPUT = frozenset({"Concat", "Max", "Min"})
_BOOL_OUT = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor",
                       "IsNaN", "IsInf"})
#: How deep the walk follows producers (exports reach integer sources within a few dozen nodes).
_DEPTH = 64


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
