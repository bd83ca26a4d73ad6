"""isinf-isnan-decompose: IsInf and IsNaN as exact comparisons.

Why: no IsInf importer before TensorRT 8.6 and no IsNaN importer before 8.2-EA (operator tables;
"No importer registered for op: IsInf"). PyTorch writes them for ``torch.isinf`` / ``isnan`` /
``isfinite`` / ``nan_to_num``-style guards and ``masked_fill(torch.isinf(x), v)``: the legacy
exporter as ``IsInf(Cast(x, DOUBLE))``, the dynamo exporter as ``IsInf(Cast(x, FLOAT))``, and
dynamo's scaled_dot_product_attention with a boolean mask ends in ``Where(IsNaN(p), 0, p)``.

Rewrite, exact for every value (comparisons only, no arithmetic that could round):

* IsInf: ``Equal(Abs(x), +inf)`` when both signs are detected; ``Equal(x, +inf)`` or
  ``Equal(x, -inf)`` for one (``detect_positive`` / ``detect_negative``); both off gives
  ``And(Equal(x, +inf), Equal(x, -inf))``, false everywhere, as the op says.
* IsNaN: ``Not(Equal(x, x))``: IEEE equality is false only for NaN.

A widening float Cast right before the op (the exporters' ``Cast(x, DOUBLE/FLOAT)``) is looked
through: widening is exact and keeps inf and NaN, and TensorRT has no DOUBLE tensors at all, so
comparing ``x`` itself removes a Cast TensorRT would also reject. The Cast stays if anything else
reads it.

Abs, Equal, Not and And have importers in every release >= 7.0 (Equal/Not/And: none in 5.1/6.0,
so the rules start at 7.0).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.passes._elementwise import float_dtype, onnx_domain
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule


def _source(x: gs.Tensor) -> gs.Tensor:
    """``x``, or the input of the widening float Cast that produced it."""
    producer = x.inputs[0] if isinstance(x, gs.Variable) and x.inputs else None
    if producer is None or producer.op != "Cast":
        return x
    inner, outer = tensor_dtype(producer.inputs[0]), tensor_dtype(x)
    if inner is None or outer is None or inner.kind != "f" or outer.kind != "f" or inner.itemsize > outer.itemsize:
        return x
    return producer.inputs[0]


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = _source(node.inputs[0])
    dtype = float_dtype(x, node.op)
    b = ctx.builder
    if node.op == "IsNaN":
        y = b.op("Not", [b.op("Equal", [x, x])])
    else:
        pos, neg = int(node.attrs.get("detect_positive", 1)), int(node.attrs.get("detect_negative", 1))
        inf = b.const(np.array(np.inf, dtype), hint="inf")
        if pos and neg:
            y = b.op("Equal", [b.op("Abs", [x]), inf])
        elif pos or neg:
            y = b.op("Equal", [x, inf if pos else b.const(np.array(-np.inf, dtype), hint="minus_inf")])
        else:
            y = b.op("And", [b.op("Equal", [x, inf]), b.op("Equal", [x, b.const(np.array(-np.inf, dtype), hint="minus_inf")])])
    replace_tensor(ctx.graph, node.outputs[0], y)


PASS = Pass(
    name="isinf-isnan-decompose",
    summary="Rewrite IsInf into Equal(Abs(x), inf) / Equal(x, +-inf) and IsNaN into Not(Equal(x, x)); exact.",
    ops=frozenset({"IsInf", "IsNaN"}),
    rules=(
        Rule(NO_IMPORTER, ">=7.0,<8.6", "no IsInf importer before TensorRT 8.6", onnx_domain, ops=frozenset({"IsInf"}),
             evidence="operator table (IsInf first listed in 8.6)"),
        Rule(NO_IMPORTER, ">=7.0,<8.2-EA", "no IsNaN importer before TensorRT 8.2", onnx_domain, ops=frozenset({"IsNaN"}),
             evidence="operator table (IsNaN first listed in 8.2-EA)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
