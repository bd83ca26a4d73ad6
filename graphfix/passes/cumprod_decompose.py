"""cumprod-decompose: CumProd (opset 26) as a chain of Muls or a log-step Mul scan.

Why: ONNX added CumProd in opset 26; no TensorRT parser through 11.1 lists it (their operator
tables document opsets <= 24), so every release fails with "No importer registered for op:
CumProd". (torch 2.14.1's dynamo exporter does not write it: ``torch.cumprod`` fails to export
at opset 23, "No ONNX function found for prims.prod"; other exporters and hand-built graphs do.)

How (the axis is first transposed to the end, and back afterwards, unless it is already last;
cumsum-decompose's helpers):

* float, static length n <= ``CHAIN``: the op's own order, ``y[j] = y[j-1] * x[j]``, as n Slices,
  n - 1 Muls and one Concat (reversed for ``reverse``; ``exclusive`` puts a 1 first). Bit for
  bit the sequential product, so exact, overflow, NaN and signed zeros included.
* integers, any length: log-step (Hillis-Steele) scan, ceil(log2 n) rounds of ``y *= shift(y, 2^k)``
  with the vacated places set to 1 (Where over a position mask: Pad with a non-zero value is
  refused before 8.2). Integer products wrap modulo 2^bits, and wrapping multiplication is
  associative, so this is exact, overflow included. A dynamic length gets
  log2(MAX_DYNAMIC_LENGTH) = 20 rounds: exact for lengths up to 2^20.
* float, longer or dynamic length: the same log-step scan. Not bit-exact: the products are
  associated differently, so a result differs from the sequential one by at most about
  2(n - 1) ulps (the rounding of two orders of n - 1 multiplications), and where a partial
  product overflows or underflows in one order and not in the other (e.g. ``[1e30, 1e30, 1e-30]``
  in float32: sequential ``inf``, log-step ``1e30``). NaN places are the same in both orders.

Cost (``bench/newops_latency.py``, onnxruntime 1.32 CPU, 1 thread, a shared and noisy machine): the chain on (4096, 32) fp32 1.5x the native op; the scan on (64, 2048) 5.2x
(fp32) and 14.5x (int64: onnxruntime's integer Mul is slow), 11 rounds.

Left out (findings): an axis computed at runtime, unknown rank, bfloat16.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._scan import MAX_DYNAMIC_LENGTH, along_last, constant_axis, log_scan
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.support import evidence

#: Static float lengths up to this get the exact sequential chain (2n nodes); longer ones the scan.
CHAIN = 64


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    axis, rank = constant_axis(node, ctx)
    dtype = tensor_dtype(x)
    if dtype is None or dtype.kind not in "fiu":
        raise Skip("input type is unknown or not a numpy number (run shape inference upstream; bfloat16 is left as is)")
    exclusive, reverse = bool(node.attrs.get("exclusive", 0)), bool(node.attrs.get("reverse", 0))
    b = ctx.builder

    def scan(moved: gs.Tensor, n: int | None) -> gs.Tensor:
        if dtype.kind == "f" and n is not None and n <= CHAIN:
            return _chain(b, moved, n, dtype, exclusive, reverse)
        return log_scan(b, moved, rank, n, exclusive, reverse, MAX_DYNAMIC_LENGTH, "Mul", np.array(1, dtype))

    replace_tensor(ctx.graph, node.outputs[0], along_last(b, x, axis, rank, scan))


def _chain(b: Builder, x: gs.Tensor, n: int, dtype: np.dtype, exclusive: bool, reverse: bool) -> gs.Tensor:
    """The sequential running product along the last axis (static length ``n``)."""
    if n == 0:
        return x
    parts = [b.slice(x, [i], [i + 1], axes=[-1]) for i in range(n)]
    order = parts[::-1] if reverse else parts
    running = [order[0]]
    for part in order[1:]:
        running.append(b.op("Mul", [running[-1], part], dtype=dtype))
    if exclusive:
        ones = b.op("Expand", [np.array(1, dtype), b.shape(order[0])], dtype=dtype)
        running = [ones, *running[:-1]]
    outs = running[::-1] if reverse else running
    return outs[0] if n == 1 else b.concat(outs, -1)


PASS = Pass(
    name="cumprod-decompose",
    summary="Rewrite CumProd (opset 26) into a sequential Mul chain (exact) or a log-step Mul scan (exact for ints).",
    ops=frozenset({"CumProd"}),
    rules=(
        Rule(NO_IMPORTER, "all", "no CumProd importer in any TensorRT release (opset 26; parser tables end at opset 24)",
             error="unsupported-op-plugin-fallback-generic",
             evidence=evidence("CumProd")),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
