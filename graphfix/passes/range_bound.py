"""range-bound: a Range whose length comes from tensor data, rebuilt from a provable bound and NonZero.

Why: TensorRT computes a Range's length on the host, as a shape tensor, so a limit computed from
tensor values fails on every release: "ITopKLayer cannot be used to compute a shape tensor"
for ``torch.arange(logits.argmax() + 1)`` (ArgMax imports as TopK), and a shape-tensor error for
``torch.arange(int(mask.sum()))`` (SuperGlue/LightGlue count the mutual matches and arange over
them). Releases >= 8.5 do accept one kind of data-dependent shape: NonZero's output.

Rewrite, when the limit ``n`` has an upper bound ``U`` computable from shapes alone::

    Range(start, n, delta)  ->  Gather(values, Reshape(NonZero(Less(values, n)), [-1]))
    with values = Range(start, U, delta)   (a constant when U is static)

Since ``values`` is increasing (``delta > 0``), the entries below ``n`` are a prefix, so NonZero
returns ``0 .. count-1`` and the result equals the original exactly whenever ``n <= U``
(``start = 0, delta = 1``: the indices themselves, no Gather). The bound is derived, not
assumed; the derivation walks back from the limit through

* values known from shapes or constants (``Gather(Shape(x), i)``, initializers): themselves;
* ``Cast`` of BOOL: 1; ``ArgMax``/``ArgMin``/``TopK`` indices: the axis size minus 1;
* ``ReduceSum``: the element bound times the number of reduced elements (static, or a product
  of ``Shape`` dims); ``Add`` of bounded values, ``Sub``/``Mul``/``Div`` by constants
  (``Mul`` by c >= 0, ``Div`` by c > 0 truncating, both monotonic), ``Min`` (any bounded
  operand), ``Max``/``Concat``/``Where`` (all operands), ``Clip`` by a constant max;
* shape-only ops (Squeeze, Unsqueeze, Reshape, Identity, Gather/Slice of the data, ReduceMax,
  ReduceMin, ...) keep the bound; widening integer Casts keep it, narrowing ones only for values
  shown non-negative (counts, indices, dims) under a bound that fits; float tensors only carry a
  static integral bound their type holds exactly (so float sums of 0/1 masks cannot round above
  it), and ``Cast`` to an integer (truncation) keeps it.

Anything else (Neg, Abs, products of data, narrowing Casts of signed data) stops the derivation and the Range
is not matched: `graphfix check` then reports the shape-tensor finding with its path. The bound
used is written into the names of the nodes that build ``values`` (``.../gf.upper_<bound>_N``).
Before 8.5 there is no NonZero, so the rule is ``>= 8.5``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Union

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.origin import CONST, DATA, SHAPE, ValueOrigins
from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.passes.base import LIMIT, Context, Pass, Rule

#: Static bounds up to this many values become one constant; larger ones a constant-input Range.
MAX_CONSTANT_VALUES = 1 << 16
#: Largest integer each float type represents exactly (with all smaller ones).
_EXACT_FLOAT = {"float16": 1 << 11, "bfloat16": 1 << 8, "float32": 1 << 24, "float64": 1 << 53}
#: Ops whose output elements are (a subset of) their first input's elements.
_SAME_VALUES = frozenset({
    "Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten", "Expand", "Tile", "Transpose", "Slice", "Gather",
    "GatherElements", "GatherND", "ReduceMax", "ReduceMin", "Dropout",
})
_MAX_DEPTH = 64


@dataclass(frozen=True)
class Sym:
    """A bound known only at runtime, computed from shapes: ``dim``/``value`` leaves or an op."""

    op: str
    args: tuple

    def describe(self) -> str:
        if self.op == "dim":
            return f"dim{self.args[1]}_of_{self.args[0].name}"
        if self.op == "value":
            return self.args[0].name
        return f"{self.op.lower()}_" + "_".join(_describe(a) for a in self.args)


Bound = Union[int, Sym]  # noqa: UP007 - a runtime alias, not only an annotation


def _describe(bound: Bound) -> str:
    return str(bound) if isinstance(bound, int) else bound.describe()


# --------------------------------------------------------------------- bound algebra
def _add(a: Bound, b: Bound) -> Bound:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if b == 0:
        return a
    return Sym("Add", (a, b))


def _mul(a: Bound, b: Bound) -> Bound:
    """a * b for a bound a and a non-negative factor b."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if b == 1:
        return a
    if a == 1:
        return b
    return Sym("Mul", (a, b))


def _div(a: Bound, c: int) -> Bound:
    """Truncating a / c for c > 0, as ONNX integer Div does."""
    if isinstance(a, int):
        return abs(a) // c * (1 if a >= 0 else -1)
    return a if c == 1 else Sym("Div", (a, c))


def _min(bounds: list[Bound]) -> Bound:
    static = [x for x in bounds if isinstance(x, int)]
    if static:
        return min(static)  # any operand bounds a Min; a static one is the cheapest
    out = bounds[0]
    for x in bounds[1:]:
        out = Sym("Min", (out, x))
    return out


def _max(bounds: list[Bound]) -> Bound:
    if all(isinstance(x, int) for x in bounds):
        return max(bounds)  # type: ignore[type-var]
    static = [x for x in bounds if isinstance(x, int)]
    symbolic = [x for x in bounds if not isinstance(x, int)]
    out: Bound = symbolic[0]
    for x in [*symbolic[1:], *([max(static)] if static else [])]:
        out = Sym("Max", (out, x))
    return out


# ------------------------------------------------------------------ bound derivation
class Bounds:
    """Upper bounds on every element of a tensor, from shapes only (memoised per pass run)."""

    def __init__(self, ctx: Context) -> None:
        self.folder = ctx.folder
        origins = ctx.options.get("origins")
        if origins is None:
            origins = ctx.options["origins"] = ValueOrigins(ctx.folder)
        self.origins: ValueOrigins = origins
        self._memo: dict[int, Bound | None] = {}
        self._nonneg: dict[int, bool] = {}

    def upper(self, t: gs.Tensor, depth: int = 0) -> Bound | None:
        if id(t) not in self._memo:
            self._memo[id(t)] = None if depth > _MAX_DEPTH else self._upper(t, depth)
        return self._memo[id(t)]

    def _upper(self, t: gs.Tensor, depth: int) -> Bound | None:
        dtype = tensor_dtype(t)
        if dtype is None:
            return None
        value = self.folder.value(t)
        if value is not None:
            return _static_max(value)
        if dtype == np.bool_:
            return 1
        single = t.shape is not None and int(np.prod([d if isinstance(d, int) else -1 for d in t.shape])) == 1
        if dtype.kind in "iu" and single and self.origins.of(t).kind in (CONST, SHAPE):
            return Sym("value", (t,))
        producer = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
        if producer is None:
            return None
        bound = self._by_op(producer, t, depth + 1)
        if bound is not None and dtype.kind == "f":
            limit = _EXACT_FLOAT.get(str(dtype))
            if not isinstance(bound, int) or limit is None or abs(bound) > limit:
                return None
        return bound

    def _by_op(self, node: gs.Node, t: gs.Tensor, depth: int) -> Bound | None:
        op, ins = node.op, [i for i in node.inputs]
        up = lambda x: self.upper(x, depth)  # noqa: E731
        if op == "Cast":
            return self._cast(ins[0], t, depth)
        if op in _SAME_VALUES:
            return up(ins[0])
        if op in ("ArgMax", "ArgMin") or (op == "TopK" and node.outputs.index(t) == 1):
            axis = int(node.attrs.get("axis", 0 if op != "TopK" else -1))
            dim = _dim(ins[0], axis)
            return None if dim is None else _add(dim, -1)
        if op == "TopK":
            return up(ins[0])
        if op in ("Shape", "Size"):
            return self._shape_values(node)
        if op in ("Concat", "Max", "Where"):
            operands = ins[1:] if op == "Where" else ins
            bounds = [up(x) for x in operands]
            return None if any(b is None for b in bounds) else _max(bounds)  # type: ignore[arg-type]
        if op == "Min":
            bounds = [b for b in (up(x) for x in ins) if b is not None]
            return _min(bounds) if bounds else None
        if op == "Clip":
            return self._clip(node, depth)
        if op == "Add":
            bounds = [up(x) for x in ins]
            return None if any(b is None for b in bounds) else _add(bounds[0], bounds[1])  # type: ignore[arg-type]
        if op in ("Sub", "Mul", "Div"):
            return self._by_constant(node, depth)
        if op == "ReduceSum":
            return self._reduce_sum(node, depth)
        return None

    @staticmethod
    def _shape_values(node: gs.Node) -> Bound | None:
        """Shape(x) entries are x's dims (Shape(x)[start:end] when sliced); Size(x) their product."""
        x = node.inputs[0]
        if x.shape is None:
            return None
        rank = len(x.shape)
        axes = list(range(rank))
        if node.op == "Shape":
            axes = axes[node.attrs.get("start", 0) : node.attrs.get("end", None)]
        dims = [_dim(x, a) for a in axes]
        if not dims or any(d is None for d in dims):
            return None
        if node.op == "Shape":
            return _max(dims)  # type: ignore[arg-type]
        total: Bound = 1
        for d in dims:
            total = _mul(total, d)  # type: ignore[arg-type]
        return total

    def _cast(self, src: gs.Tensor, out: gs.Tensor, depth: int) -> Bound | None:
        s, o = tensor_dtype(src), tensor_dtype(out)
        if s is None or o is None:
            return None
        if s == np.bool_:
            return 1
        if o.kind in "iu" and s.kind in "iu" and o.itemsize < s.itemsize:
            # narrowing wraps negative and huge values; a count or index in range stays itself
            bound = self.upper(src, depth) if self.nonneg(src, depth) else None
            return bound if not isinstance(bound, int) or bound <= np.iinfo(o).max else None
        if o.kind in "iuf" and s.kind in "iuf":
            return self.upper(src, depth)  # widening, or float -> int truncation (monotonic)
        return None

    def nonneg(self, t: gs.Tensor, depth: int = 0) -> bool:
        """Every element is >= 0 (counts, indices, dims): what a narrowing Cast needs besides a bound."""
        if id(t) not in self._nonneg:
            self._nonneg[id(t)] = depth <= _MAX_DEPTH and self._is_nonneg(t, depth)
        return self._nonneg[id(t)]

    def _is_nonneg(self, t: gs.Tensor, depth: int) -> bool:
        value = self.folder.value(t)
        if value is not None:
            return bool(np.asarray(value).size) and bool(np.all(np.asarray(value) >= 0))
        dtype = tensor_dtype(t)
        if dtype is not None and (dtype == np.bool_ or dtype.kind == "u"):
            return True
        node = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
        if node is None:
            return False
        if node.op in ("ArgMax", "ArgMin", "Shape", "Size", "NonZero", "Relu", "Abs") or (node.op == "TopK" and node.outputs.index(t) == 1):
            return True
        if node.op in _SAME_VALUES or node.op in ("Cast", "TopK"):
            return self.nonneg(node.inputs[0], depth + 1)
        if node.op in ("ReduceSum", "Add", "Mul", "Div", "Max", "Min", "Concat"):
            return all(self.nonneg(i, depth + 1) for i in node.inputs if i.name and not (node.op == "ReduceSum" and i is not node.inputs[0]))
        if node.op == "Where":
            return all(self.nonneg(i, depth + 1) for i in node.inputs[1:])
        return False

    def _clip(self, node: gs.Node, depth: int) -> Bound | None:
        hi_value = node.attrs.get("max") if len(node.inputs) < 3 else self.folder.value(node.inputs[2]) if node.inputs[2].name else None
        bounds = [b for b in (self.upper(node.inputs[0], depth), None if hi_value is None else _static_max(np.asarray(hi_value))) if b is not None]
        return _min(bounds) if bounds else None

    def _by_constant(self, node: gs.Node, depth: int) -> Bound | None:
        a, c_t = node.inputs
        c = self.folder.value(c_t)
        if c is None and node.op == "Mul":
            a, c_t = c_t, a
            c = self.folder.value(c_t)
        if c is None or c.size == 0 or not np.all(np.isfinite(c)) or not np.all(np.equal(np.mod(c, 1), 0)):
            return None
        ua = self.upper(a, depth)
        if ua is None:
            return None
        if node.op == "Sub":
            return _add(ua, -int(np.min(c)))
        if c.size != 1:
            return None
        k = int(c.reshape(-1)[0])
        if node.op == "Mul":
            return _mul(ua, k) if k >= 0 else None
        dtype = tensor_dtype(node.outputs[0])
        return _div(ua, k) if k > 0 and dtype is not None and dtype.kind in "iu" else None

    def _reduce_sum(self, node: gs.Node, depth: int) -> Bound | None:
        x = node.inputs[0]
        if x.shape is None:
            return None
        rank = len(x.shape)
        if len(node.inputs) > 1 and node.inputs[1].name:
            value = self.folder.value(node.inputs[1])
            if value is None:
                return None
            axes = [int(a) for a in np.asarray(value).reshape(-1)]
        else:
            axes = list(node.attrs.get("axes", []))
        if not axes:
            if node.attrs.get("noop_with_empty_axes", 0):
                return self.upper(x, depth)
            axes = list(range(rank))
        element = self.upper(x, depth)
        if element is None:
            return None
        count: Bound = 1
        for axis in sorted({a % rank for a in axes}):
            dim = _dim(x, axis)
            if dim is None:
                return None
            count = _mul(count, dim)
        return _mul(element, count)


def _static_max(value: np.ndarray) -> int | None:
    arr = np.asarray(value)
    if arr.size == 0 or arr.dtype.kind not in "biuf":
        return None
    top = float(np.max(arr))
    return math.ceil(top) if math.isfinite(top) else None


def _dim(t: gs.Tensor, axis: int) -> Bound | None:
    if t.shape is None:
        return None
    rank = len(t.shape)
    axis = axis % rank if rank else 0
    d = t.shape[axis] if rank else None
    if isinstance(d, (int, np.integer)) and d >= 0:
        return int(d)
    return Sym("dim", (t, axis))


# ------------------------------------------------------------------------ matching
def _plan(node: gs.Node, ctx: Context) -> tuple[int, int, Bound] | None:
    cache = ctx.options.setdefault("range_bound_plans", {})
    if id(node) not in cache:
        cache[id(node)] = _classify(node, ctx)
    return cache[id(node)]


def _classify(node: gs.Node, ctx: Context) -> tuple[int, int, Bound] | None:
    """(start, delta, upper bound of the limit) for an integer Range with a data-dependent limit."""
    dtype = tensor_dtype(node.outputs[0])
    if dtype is None or dtype.kind not in "iu" or len(node.inputs) != 3:
        return None
    start, delta = (ctx.folder.value(t) for t in (node.inputs[0], node.inputs[2]))
    if start is None or delta is None or start.size != 1 or delta.size != 1:
        return None
    s, d = int(start.reshape(-1)[0]), int(delta.reshape(-1)[0])
    if d <= 0:
        return None
    bounds = ctx.options.get("range_bounds")
    if bounds is None:
        bounds = ctx.options["range_bounds"] = Bounds(ctx)
    if bounds.origins.of(node.inputs[1]).kind != DATA:
        return None
    upper = bounds.upper(node.inputs[1])
    return None if upper is None else (s, d, upper)


def _data_limit_with_bound(node: gs.Node, ctx: Context) -> bool:
    return _plan(node, ctx) is not None


# ------------------------------------------------------------------------- rewrite
def rewrite(node: gs.Node, ctx: Context) -> None:
    s, d, upper = _plan(node, ctx)  # type: ignore[misc]
    dtype = tensor_dtype(node.outputs[0])
    b = ctx.builder
    hint = "upper_" + re.sub(r"[^A-Za-z0-9]+", "_", _describe(upper)).strip("_")[:48]
    values = _values(b, s, d, upper, dtype, hint)  # type: ignore[arg-type]
    inside = b.op("Less", [values, node.inputs[1]])
    flat = b.reshape(b.op("NonZero", [inside], dtype=np.int64), np.array([-1], np.int64))
    if s == 0 and d == 1:
        out = flat if dtype == np.int64 else b.cast(flat, dtype)
    else:
        out = b.op("Gather", [values, flat], {"axis": 0})
    replace_tensor(ctx.graph, node.outputs[0], out)


def _values(b: Builder, s: int, d: int, upper: Bound, dtype: np.dtype, hint: str) -> gs.Tensor:
    """Range(s, upper, d): every value the original Range can produce, in order."""
    if isinstance(upper, int):
        count = max(-(-(upper - s) // d), 0)
        if count <= MAX_CONSTANT_VALUES:
            return b.const(np.arange(s, s + count * d, d, dtype=np.int64).astype(dtype), hint=hint)
        limit: gs.Tensor = b.const(np.array(upper, dtype), hint=hint)
    else:
        limit = _materialize(b, upper)
        if dtype != np.int64:
            limit = b.cast(limit, dtype)
    values = b.op("Range", [b.const(np.array(s, dtype)), limit, b.const(np.array(d, dtype))], dtype=dtype)
    values.inputs[0].name = b.name(f"Range_{hint}")  # the report and TensorRT's layer name show the bound
    return values


def _materialize(b: Builder, bound: Bound) -> gs.Tensor:
    """An INT64 scalar computed from shapes (every op here can compute TensorRT shape tensors)."""
    if isinstance(bound, int):
        return b.const(np.array(bound, np.int64))
    if bound.op == "dim":
        tensor, axis = bound.args
        return b.op("Gather", [b.shape(tensor), np.array(axis, np.int64)], {"axis": 0}, dtype=np.int64)
    if bound.op == "value":
        (tensor,) = bound.args
        scalar = b.reshape(tensor, np.array([], np.int64))
        return scalar if tensor_dtype(tensor) == np.int64 else b.cast(scalar, np.int64)
    args = [_materialize(b, a) for a in bound.args]
    if bound.op in ("Min", "Max") and b.opset < 12:  # integer Min/Max arrive in opset 12
        first = b.op("Less" if bound.op == "Min" else "Greater", [args[0], args[1]])
        return b.op("Where", [first, args[0], args[1]], dtype=np.int64)
    return b.op(bound.op, args, dtype=np.int64)


PASS = Pass(
    name="range-bound",
    summary="Rebuild a Range whose length comes from tensor data as NonZero over a shape-derived upper bound.",
    ops=frozenset({"Range"}),
    rules=(
        Rule(LIMIT, ">=8.5", "Range length computed from tensor data: ITopKLayer / data cannot compute a shape tensor",
             _data_limit_with_bound, error="layer-cannot-compute-shape-tensor", evidence="PARSER_NOTES shape-tensor rules"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
