"""trilu-decompose: Trilu as a row/column comparison mask applied with Where (And for BOOL).

Why: TensorRT parsers before 8.5 have no Trilu importer ("No importer registered for op:
Trilu"), and the 8.5 importer takes only rank-2 or rank-3 input ("Trilu input must have 2 or 3
input dimensions!", N-D from 8.6). ``torch.triu``/``torch.tril`` export to Trilu from opset 14:
causal attention masks (``torch.triu(torch.full((L, L), -inf), 1)``), batched ``[B, H, L, L]``
score masking, banded masks with a ``diagonal`` argument.

Rewrite: with ``d = col - row`` over the last two axes, ``upper`` keeps ``d >= k`` and ``lower``
keeps ``d <= k``, written ``Not(Less(d, k))`` / ``Not(Greater(d, k))`` (GreaterOrEqual is only
imported from 7.2-ngc). Rows and columns are constant aranges for static dims (a constant mask
when it is small and ``k`` is a constant) or ``Range(0, Gather(Shape(x), axis))``, which every
release >= 7.0 computes as a shape tensor; ``k`` may be a runtime scalar. The mask is applied
with ``Where(mask, x, 0)``, not a product, so ``-inf`` entries outside the kept triangle become 0
rather than NaN; BOOL input uses ``And``. The mask and the zero are given the input's rank
(TensorRT 7.x Where rejects operands of different ranks).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, optional_input, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import LIMIT, NO_IMPORTER, Context, Pass, Rule

#: Static masks up to this many elements become one BOOL constant.
MAX_CONSTANT_MASK = 1 << 16


def _rank_above_3(node: gs.Node, ctx: Context) -> bool:
    shape = node.inputs[0].shape
    return shape is not None and len(shape) > 3


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    dtype = tensor_dtype(x)
    if x.shape is None or dtype is None:
        raise Skip("input rank or type is unknown (run shape inference upstream)")
    rank = len(x.shape)
    upper = bool(node.attrs.get("upper", 1))
    k_input = optional_input(node, 1)
    k_value = ctx.folder.value(k_input) if k_input is not None else np.array(0, np.int64)
    b = ctx.builder
    k: int | gs.Tensor = int(np.asarray(k_value).reshape(-1)[0]) if k_value is not None else b.reshape(k_input, np.array([], np.int64))
    n, m = (x.shape[rank - 2], x.shape[rank - 1])
    static = all(isinstance(d, (int, np.integer)) and d >= 0 for d in (n, m))
    if static and isinstance(k, int) and int(n) * int(m) <= MAX_CONSTANT_MASK:
        mask: gs.Tensor = b.const(_mask(int(n), int(m), k, upper).reshape((1,) * (rank - 2) + (int(n), int(m))), hint="trilu_mask")
    else:
        mask = _runtime_mask(b, x, rank, k, upper)
    if dtype == np.bool_:
        out = b.op("And", [x, mask])
    else:
        out = b.op("Where", [mask, x, np.zeros((1,) * rank, dtype)])
    replace_tensor(ctx.graph, node.outputs[0], out)


def _mask(n: int, m: int, k: int, upper: bool) -> np.ndarray:
    d = np.arange(m)[None, :] - np.arange(n)[:, None]
    return d >= k if upper else d <= k


def _runtime_mask(b: Builder, x: gs.Tensor, rank: int, k: int | gs.Tensor, upper: bool) -> gs.Tensor:
    rows = _arange(b, x, rank - 2)
    cols = _arange(b, x, rank - 1)
    diff = b.op("Sub", [cols, b.unsqueeze(rows, [1])])  # [n, m]
    kk = b.const(np.array(k, np.int64), hint="k") if isinstance(k, int) else k
    outside = b.op("Less" if upper else "Greater", [diff, kk])
    mask = b.op("Not", [outside])
    return b.unsqueeze(mask, list(range(rank - 2))) if rank > 2 else mask


def _arange(b: Builder, x: gs.Tensor, axis: int) -> gs.Tensor:
    dim = x.shape[axis]
    if isinstance(dim, (int, np.integer)) and dim >= 0:
        return b.const(np.arange(int(dim), dtype=np.int64), hint="arange")
    length = b.op("Gather", [b.shape(x), np.array(axis, np.int64)], {"axis": 0})
    return b.op("Range", [np.array(0, np.int64), length, np.array(1, np.int64)], dtype=np.int64)


PASS = Pass(
    name="trilu-decompose",
    summary="Rewrite Trilu (torch.triu/tril) into a row/column comparison mask and Where (And for BOOL).",
    ops=frozenset({"Trilu"}),
    rules=(
        Rule(NO_IMPORTER, ">=7.0,<8.5", "no Trilu importer", error="decomposable-op-missing",
             evidence="operator table; importer source (first in 8.5)"),
        Rule(LIMIT, ">=8.5,<8.6", "Trilu on rank > 3 (the 8.5 importer takes rank 2 or 3)", _rank_above_3,
             error="decomposable-op-missing", evidence="importer source 8.5 GA and 8.5.3"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
