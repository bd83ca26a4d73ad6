"""range-inputs: Range inputs TensorRT can use as shape tensors, or a finding that says why not.

Why: TensorRT computes Range's length on the host, so start/limit/delta are shape tensors. They
must be integer when dynamic before 8.4 ("For range operator with dynamic inputs, this version
of TensorRT only supports INT32"), one of INT32/INT64/FP32 after, and computed only by layers that
can produce shape tensors: a limit that comes from ArgMax/ArgMin/TopK (imported as TopK) fails on
every version with "ITopKLayer cannot be used to compute a shape tensor"; one computed from the
values of an execution tensor (``x.max()``) cannot be a shape tensor at all.

Rewrite:
* Range whose inputs fold to constants becomes an initializer (large outputs: scalar
  initializer inputs instead);
* float Range over integer shape arithmetic (``torch.arange(x.shape[1] * 0.5)``: constant integral
  start/delta, limit ``Cast(n)``, ``Cast(n) * c`` or ``Cast(n) / c``) becomes an integer Range
  plus a Cast back, when that is exactly equal (integral c; or 1/c integral with delta 1, using
  ``ceil(n / k) = (n + k - 1) / k`` for shape-derived n >= 0: an integer Div of a non-negative
  value by a positive constant, where truncation and floor agree, feeding Range and no Mul, so
  no runtime or optimizer reads it otherwise; see mod-decompose);
* float Range with a rational step (``torch.arange(0, n, 0.5)``, ``1/k``, ``p/q``; integral start,
  limit ``Cast(n)`` times an exact dyadic factor) becomes ``start + delta * Cast(Range(0, count,
  1))``, ``count = max(ceil((limit - start) / delta), 0)`` in integers: ``X = sign(p) * (n*a*q -
  start*b*q)`` over ``Y = b*|p|`` for limit ``n*a/b`` and step ``p/q``, ``(max(X, 0) + Y - 1) / Y``:
  the numerator is never negative, so truncating and flooring division agree (onnxruntime
  truncates, the ONNX reference floors). The step's value must be ``p/q`` exactly, or round away
  from zero (``fl(1/3) > 1/3``): then ``(limit - start) / delta`` never crosses an integer that
  ``(limit - start) * q / p`` does not reach, and the count is the float count. Exact while the
  values stay below 2^24 (float32's integers);
* a data-dependent limit, or a float Range with runtime inputs that has no exact integer form, is
  never rewritten: the finding names the Range and what to change upstream (for data, the path
  to the offending node and the TensorRT error it will hit).

The rules do not depend on the rewrite: a float Range with runtime inputs is rejected by 8.0-8.2
whether graphfix can rewrite it or not (``check`` flags it, the rewrite says why it cannot).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.origin import DATA, SHAPE, Origin, ValueOrigins
from graphfix.graph import Builder, is_weights, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import TYPE, Context, Pass, Rule

#: Range outputs up to this many elements are folded whole; bigger ones keep a Range node.
MAX_FOLDED_ELEMENTS = 1 << 16


def _float_runtime(node: gs.Node, ctx: Context) -> bool:
    """A float Range whose inputs are not all weights: 8.0-GA/8.2-GA's Range importer takes the
    float case only when start, limit and delta are all weights and otherwise asserts INT32 ("For
    range operator with dynamic inputs, this version of TensorRT only supports INT32!"). A
    statement about the node alone, whatever graphfix can rewrite."""
    dtype = tensor_dtype(node.outputs[0])
    return dtype is not None and dtype.kind == "f" and not all(is_weights(t) for t in node.inputs)


def _non_fp32_runtime(node: gs.Node, ctx: Context) -> bool:
    return _float_runtime(node, ctx) and tensor_dtype(node.outputs[0]) != np.float32


def rewrite(node: gs.Node, ctx: Context) -> None:
    kind, detail = _plan(node, ctx)
    if kind in ("data", "none"):
        raise Skip(detail)
    b = ctx.builder
    if kind == "fold":
        replace_tensor(ctx.graph, node.outputs[0], _folded(b, node, ctx))
    elif kind == "integer":
        replace_tensor(ctx.graph, node.outputs[0], _integer_range(b, node, ctx))
    else:
        replace_tensor(ctx.graph, node.outputs[0], _rational_range(b, node, ctx))


NO_FORM = ("no exact integer form: start and delta must be constants, start integral, delta a ratio p/q, and the "
           "limit Cast(n), Cast(n) * c or Cast(n) / c of an integer n; compute the arange in integers upstream "
           "(torch.arange(count) * step + start) or target TensorRT >= 8.4")


def _plan(node: gs.Node, ctx: Context) -> tuple[str, str]:
    """("fold"|"integer"|"rational"|"data"|"none", detail): how the rewrite would go (only asked
    for nodes a rule matched: the rules never ask it)."""
    cache = ctx.options.setdefault("range_plans", {})
    if id(node) not in cache:
        cache[id(node)] = _classify(node, ctx)
    return cache[id(node)]


def _classify(node: gs.Node, ctx: Context) -> tuple[str, str]:
    if all(is_weights(t) for t in node.inputs):
        return ("none", "every input is a weight: nothing to rewrite")
    if all(ctx.folder.value(t) is not None for t in node.inputs):
        return ("fold", "")
    for name, t in zip(("start", "limit", "delta"), node.inputs, strict=True):
        origin = _origin(t, ctx)
        if origin.kind == DATA:
            return ("data", _data_message(node, name, origin))
    dtype = tensor_dtype(node.outputs[0])
    if dtype is not None and dtype.kind == "f" and _integer_limit(node, ctx) is not None:
        return ("integer", "")
    if dtype is not None and dtype.kind == "f" and _rational(node, ctx) is not None:
        return ("rational", "")
    return ("none", NO_FORM)


def _origin(t: gs.Tensor, ctx: Context) -> Origin:
    origins = ctx.options.get("origins")
    if origins is None:
        origins = ctx.options["origins"] = ValueOrigins(ctx.folder)
    return origins.of(t)


def _data_message(node: gs.Node, which: str, origin: Origin) -> str:
    layer = origin.layer
    if layer:
        error = f"'{layer} cannot be used to compute a shape tensor'" + (" (ArgMax/ArgMin are imported as TopK)" if origin.path[0].op.startswith("Arg") else "")
    else:
        error = "a shape-tensor error (a Range length cannot come from tensor values)"
    return (f"{which} is data-dependent: {origin.describe()} -> Range '{node.name}'; TensorRT will fail with {error}. "
            "Compute the length from a shape (x.shape[i]) or a constant upstream, or take the arange out of the exported model")


# ------------------------------------------------------------------- rewrites
def _folded(b: Builder, node: gs.Node, ctx: Context) -> gs.Tensor:
    start, limit, delta = (np.asarray(ctx.folder.value(t)) for t in node.inputs)
    dtype = start.dtype
    count = max(int(np.ceil((limit - start) / delta)), 0) if delta != 0 else 0
    if count <= MAX_FOLDED_ELEMENTS:
        return b.const(np.arange(start, limit, delta, dtype=dtype)[:count].astype(dtype), hint="range")
    return b.op("Range", [b.const(start), b.const(limit), b.const(delta)], dtype=dtype)


def _integer_limit(node: gs.Node, ctx: Context) -> tuple[gs.Tensor, int, int, int, int] | None:
    """(n, multiplier, divisor, start, delta) when limit = Cast(n) * multiplier / divisor exactly."""
    start, delta = ctx.folder.value(node.inputs[0]), ctx.folder.value(node.inputs[2])
    if start is None or delta is None or start.size != 1 or delta.size != 1:
        return None
    s, d = float(start.reshape(-1)[0]), float(delta.reshape(-1)[0])
    if not (s.is_integer() and d.is_integer()) or d == 0:
        return None
    limit = node.inputs[1]
    mul, div = 1, 1
    producer = limit.inputs[0] if limit.inputs else None
    if producer is not None and producer.op in ("Mul", "Div"):
        consts = [ctx.folder.value(i) for i in producer.inputs]
        k = 1 if consts[1] is not None else 0 if producer.op == "Mul" and consts[0] is not None else None
        if k is None or consts[k].size != 1:
            return None
        c = float(consts[k].reshape(-1)[0])
        if producer.op == "Div":
            c = 1.0 / c if c else 0.0
        if c > 0 and c.is_integer():
            mul = int(c)
        elif c > 0 and (1 / c).is_integer() and d == 1:
            div = int(round(1 / c))
        else:
            return None
        limit = producer.inputs[1 - k]
        producer = limit.inputs[0] if limit.inputs else None
    n = _cast_integer(producer)
    if n is None or (div != 1 and _origin(n, ctx).kind != SHAPE):
        return None
    return n, mul, div, int(s), int(d)


def _cast_integer(producer: gs.Node | None) -> gs.Tensor | None:
    """``n`` where a limit is ``Cast(n)`` of an integer tensor, else None."""
    if producer is None or producer.op != "Cast":
        return None
    n = producer.inputs[0]
    n_dtype = tensor_dtype(n)
    return n if n_dtype is not None and n_dtype.kind in "iu" else None


def _integer_range(b: Builder, node: gs.Node, ctx: Context) -> gs.Tensor:
    n, mul, div, s, d = _integer_limit(node, ctx)  # type: ignore[misc]
    int_type = tensor_dtype(n)
    limit: gs.Tensor = n
    if mul != 1:
        limit = b.op("Mul", [limit, np.array(mul, int_type)])
    if div != 1:
        limit = b.op("Div", [b.op("Add", [limit, np.array(div - 1, int_type)]), np.array(div, int_type)])
    ints = b.op("Range", [np.array(s, int_type), limit, np.array(d, int_type)], dtype=int_type)
    return b.cast(ints, tensor_dtype(node.outputs[0]))


#: Largest denominator tried for a step given as a rounded ratio (1/3, 2/7 ...).
MAX_DENOMINATOR = 1024


def _scalar(t: gs.Tensor, ctx: Context) -> float | None:
    value = ctx.folder.value(t)
    if value is None or np.asarray(value).size != 1:
        return None
    v = float(np.asarray(value).reshape(-1)[0])
    return v if np.isfinite(v) else None


def _step(d: float, dtype: np.dtype) -> Fraction | None:
    """The ratio p/q the step ``d`` stands for: its exact value when that has a small denominator
    (0.5, 0.75), else the nearest small ratio that rounds to ``d`` in ``dtype``, provided ``d``
    rounds away from zero (then the float count equals the ratio's count, see the module doc)."""
    exact = Fraction(d)
    if exact.denominator <= MAX_DENOMINATOR:
        return exact
    ratio = exact.limit_denominator(MAX_DENOMINATOR)
    if ratio == 0 or float(np.asarray(float(ratio), dtype)) != d or abs(exact) < abs(ratio):
        return None
    return ratio


def _rational(node: gs.Node, ctx: Context) -> tuple[gs.Tensor, int, int, int, Fraction] | None:
    """(n, a, b, start, step) when start is integral, step a ratio and limit = Cast(n) * a / b with
    b a power of two (exactly representable), n an integer tensor."""
    s, d = _scalar(node.inputs[0], ctx), _scalar(node.inputs[2], ctx)
    dtype = tensor_dtype(node.outputs[0])
    if s is None or d is None or d == 0 or not s.is_integer() or dtype is None:
        return None
    step = _step(d, dtype)
    if step is None:
        return None
    limit, factor = node.inputs[1], Fraction(1)
    producer = limit.inputs[0] if limit.inputs else None
    if producer is not None and producer.op in ("Mul", "Div"):
        consts = [_scalar(i, ctx) for i in producer.inputs]
        k = 1 if consts[1] is not None else 0 if producer.op == "Mul" and consts[0] is not None else None
        if k is None or not consts[k]:
            return None
        factor = Fraction(consts[k]) if producer.op == "Mul" else 1 / Fraction(consts[k])
        if factor <= 0 or factor.denominator & (factor.denominator - 1):  # n * a / b exact only for b = 2^e
            return None
        limit = producer.inputs[1 - k]
        producer = limit.inputs[0] if limit.inputs else None
    n = _cast_integer(producer)
    return None if n is None else (n, factor.numerator, factor.denominator, int(s), step)


def _rational_range(b: Builder, node: gs.Node, ctx: Context) -> gs.Tensor:
    """start + delta * Cast(Range(0, count, 1)), count in integers (module doc)."""
    n, a, den, s, step = _rational(node, ctx)  # type: ignore[misc]
    p, q = step.numerator, step.denominator
    int_type = tensor_dtype(n)
    sign = 1 if p > 0 else -1
    x: gs.Tensor = n
    if a * q * sign != 1:
        x = b.op("Mul", [x, np.array(a * q * sign, int_type)])
    if s * den * q:
        x = b.op("Sub", [x, np.array(s * den * q * sign, int_type)])
    if sign < 0 or s > 0 or _origin(n, ctx).kind != SHAPE:  # only a shape-derived n - (start <= 0) is >= 0
        x = b.max(x, np.array(0, int_type))
    y = den * abs(p)
    count = x if y == 1 else b.op("Div", [b.op("Add", [x, np.array(y - 1, int_type)]), np.array(y, int_type)])
    dtype = tensor_dtype(node.outputs[0])
    ints = b.op("Range", [np.array(0, int_type), count, np.array(1, int_type)], dtype=int_type)
    out: gs.Tensor = b.cast(ints, dtype)
    delta = np.asarray(ctx.folder.value(node.inputs[2])).reshape(()).astype(dtype)
    if delta != 1:
        out = b.op("Mul", [out, delta])
    if s:
        out = b.op("Add", [out, np.array(s, dtype)])
    return out


PASS = Pass(
    name="range-inputs",
    summary="Fold constant Range, make float shape-arithmetic Range integer, report data-dependent limits.",
    ops=frozenset({"Range"}),
    rules=(
        Rule(TYPE, "<8.4", "float Range with inputs computed at runtime (INT32 only before 8.4)", _float_runtime,
             error="range-input-types",
             evidence="onnx-tensorrt 8.0-GA and 8.2-GA builtin_op_importers.cpp, Range importer: the float case only "
                      "when inputs 0-2 are all weights (staticFloatRangeImporter), else ASSERT isInt32 'For range "
                      "operator with dynamic inputs, this version of TensorRT only supports INT32!'; 8.4-GA accepts "
                      "INT32 or FP32 ('only supports int32 and float input types for Range')"),
        Rule(TYPE, ">=8.4", "Range of a float type other than FP32 with runtime inputs", _non_fp32_runtime,
             error="range-input-types", evidence="operator table types"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
