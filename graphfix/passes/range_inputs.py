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
* a data-dependent limit is never rewritten: the finding names the Range, the path to the
  offending node, the TensorRT error it will hit and what to change upstream.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, is_weights, replace_tensor, tensor_dtype
from graphfix.graph.origin import DATA, SHAPE, Origin, ValueOrigins
from graphfix.passes.base import TYPE, Context, Pass, Rule, Skip

#: Range outputs up to this many elements are folded whole; bigger ones keep a Range node.
MAX_FOLDED_ELEMENTS = 1 << 16


def _float_runtime(node: gs.Node, ctx: Context) -> bool:
    plan = _plan(node, ctx)
    dtype = tensor_dtype(node.outputs[0])
    return plan is not None and plan[0] != "data" and dtype is not None and dtype.kind == "f"


def _non_fp32_runtime(node: gs.Node, ctx: Context) -> bool:
    return _float_runtime(node, ctx) and tensor_dtype(node.outputs[0]) != np.float32


def rewrite(node: gs.Node, ctx: Context) -> None:
    kind, detail = _plan(node, ctx)  # type: ignore[misc]
    if kind == "data":
        raise Skip(detail)
    b = ctx.builder
    if kind == "fold":
        replace_tensor(ctx.graph, node.outputs[0], _folded(b, node, ctx))
    else:
        replace_tensor(ctx.graph, node.outputs[0], _integer_range(b, node, ctx))


def _plan(node: gs.Node, ctx: Context) -> tuple[str, str] | None:
    """("fold"|"integer"|"data", detail) or None when TensorRT takes the Range as it is."""
    cache = ctx.options.setdefault("range_plans", {})
    if id(node) not in cache:
        cache[id(node)] = _classify(node, ctx)
    return cache[id(node)]


def _classify(node: gs.Node, ctx: Context) -> tuple[str, str] | None:
    if all(is_weights(t) for t in node.inputs):
        return None
    if all(ctx.folder.value(t) is not None for t in node.inputs):
        return ("fold", "")
    for name, t in zip(("start", "limit", "delta"), node.inputs, strict=True):
        origin = _origin(t, ctx)
        if origin.kind == DATA:
            return ("data", _data_message(node, name, origin))
    dtype = tensor_dtype(node.outputs[0])
    if dtype is not None and dtype.kind == "f" and _integer_limit(node, ctx) is not None:
        return ("integer", "")
    return None


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
    if producer is None or producer.op != "Cast":
        return None
    n = producer.inputs[0]
    n_dtype = tensor_dtype(n)
    if n_dtype is None or n_dtype.kind not in "iu" or (div != 1 and _origin(n, ctx).kind != SHAPE):
        return None
    return n, mul, div, int(s), int(d)


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


PASS = Pass(
    name="range-inputs",
    order=70,  # after the passes that may create Range (cumsum-decompose's arange_like)
    summary="Fold constant Range, make float shape-arithmetic Range integer, report data-dependent limits.",
    ops=frozenset({"Range"}),
    rules=(
        Rule(TYPE, "<8.4", "float Range with inputs computed at runtime (INT32 only before 8.4)", _float_runtime,
             error="range-input-types", evidence="importer source 8.0-8.2"),
        Rule(TYPE, ">=8.4", "Range of a float type other than FP32 with runtime inputs", _non_fp32_runtime,
             error="range-input-types", evidence="operator table types"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
