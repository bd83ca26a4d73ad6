"""aten-fallback: ATen nodes (torch.onnx ``ONNX_ATEN_FALLBACK``) as standard ONNX ops.

Why: ``torch.onnx.export(..., operator_export_type=ONNX_ATEN_FALLBACK)`` keeps every op the
exporter cannot lower as an ``ATen`` node (domain ``org.pytorch.aten``, string attribute
``operator``, usually ``overload_name``). No TensorRT release has an ATen importer ("No importer
registered for op: ATen"), and onnxruntime cannot run it either. The classic case is
``nn.AdaptiveAvgPool2d`` whose output size does not divide the input size ("output size that are
not factor of input size"); norms fall back in Caffe2-flavoured builds and when the input rank
is unknown at export.

Node forms read (see :mod:`graphfix.analysis.aten_reference`): every argument an input (scalars and int
lists as Constant tensors, ``None`` as an empty input), or tensors as inputs and the other
arguments as attributes named after the ATen schema. Non-tensor arguments must fold to constants.

Rewrites (only ops every TensorRT release imports: pooling, Reduce, MatMul, Slice, Concat,
elementwise, Reshape, Transpose):

* ``adaptive_{avg,max}_pool{1,2,3}d`` (and ``_adaptive_*``), static spatial sizes (an unbatched
  input gets a batch axis for the pools and loses it after): where every axis divides
  (``in % out == 0``) one AveragePool/MaxPool with ``stride = in / out`` and
  ``kernel = in - (out - 1) * stride``; otherwise axis by axis (pooling is separable over
  rectangular windows): a dividing axis is a pool with kernel 1 on the others; a non-dividing axis
  uses PyTorch's bins ``[floor(i*in/out), ceil((i+1)*in/out))``, exact for every size: for an
  average over one of the last two axes one MatMul with an ``[out, in]`` matrix of ``1/len``,
  otherwise Slice + ReduceMean/ReduceMax per window + Concat. At opset >= 18, where parsers
  before 10.0 ignore the axes input of ReduceMean/ReduceMax (and reduce over everything), a
  window is ReduceSum / length or a MaxPool over the window unless ``--trt`` is >= 10.0. Max
  pooling's indices output must be unused.
* ``layer_norm``, ``group_norm``, ``instance_norm``: layernorm-decompose's exact two-pass
  standardisation ``(x - mean) / sqrt(mean((x - mean) ** 2) + eps)`` (same opset-18 care), then
  the affine weight/bias (running statistics when ``use_input_stats`` is false).
* ``clamp``/``clip`` (Scalar and Tensor overloads): ``Min(Max(x, lo), hi)`` in x's dtype.
* ``pixel_shuffle``/``pixel_unshuffle`` on rank-4 inputs with static H, W: Reshape/Transpose.

fp16/bf16 inputs of averages and norms are computed in float32 and cast back, as PyTorch does
(its CPU and CUDA kernels accumulate in float). Not rewritten (reported as findings): ATen ops
without an ONNX equivalent TensorRT imports (``linalg_*``, ``embedding_bag``, ``grid_sampler``
below opset 16, ``im2col``/``col2im``, ``upsample_*`` with ``align_corners`` below opset 11),
adaptive pooling over dynamic spatial dims, and max pooling whose indices are used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.aten_reference import (
    ATEN_DOMAIN,
    ATEN_SIGNATURES,
    INTS,
    OPTIONAL,
    TENSOR,
    bind_arguments,
    int_list,
    operator_name,
    pool_bins,
    scalar,
)
from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._norm import element_count, reduce_mean_reads_axes, standardize
from graphfix.passes._provenance import runtime_path
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule

Args = dict[str, Any]


def _is_aten(node: gs.Node, ctx: Context) -> bool:
    return (node.domain or "") in ("", "ai.onnx", ATEN_DOMAIN)


def rewrite(node: gs.Node, ctx: Context) -> None:
    operator = operator_name(node.attrs)
    if operator not in REWRITES:
        raise Skip(f"aten::{operator} has no ONNX equivalent graphfix rewrites (change the export: a supported op or a newer opset)")
    args = _bind(node, operator, ctx)
    outputs = REWRITES[operator](node, args, ctx)
    for old, new in zip(node.outputs, outputs, strict=False):
        replace_tensor(ctx.graph, old, new)


def _bind(node: gs.Node, operator: str, ctx: Context) -> Args:
    """Tensor arguments as tensors (None when empty); the others as constant Python values."""
    attrs = {k: v for k, v in node.attrs.items() if k not in ("operator", "overload_name")}
    bound = bind_arguments(operator, [t if t.name else None for t in node.inputs], attrs)
    kinds = dict(ATEN_SIGNATURES[operator])
    for name, value in bound.items():
        if kinds[name] in (TENSOR, OPTIONAL) or not isinstance(value, gs.Tensor):
            continue
        folded = ctx.folder.value(value)
        if folded is None:
            raise Skip(f"argument {name} of aten::{operator} is not constant: {runtime_path(value, ctx.folder)}")
        bound[name] = int_list(folded) if kinds[name] == INTS else scalar(folded)
    return bound


def _dtype(x: gs.Tensor, operator: str) -> np.dtype:
    dtype = tensor_dtype(x)
    if dtype is None:
        raise Skip(f"the input type of aten::{operator} is unknown (run shape inference upstream)")
    return dtype


def _rank(x: gs.Tensor, operator: str) -> int:
    if x.shape is None:
        raise Skip(f"the input rank of aten::{operator} is unknown (run shape inference upstream)")
    return len(x.shape)


def _to_float(b: Builder, x: gs.Tensor, dtype: np.dtype) -> gs.Tensor:
    """Half-precision data is averaged in float32 (PyTorch's accumulation type)."""
    return b.cast(x, np.float32) if dtype != np.float32 and dtype.kind == "f" else x


def _back(b: Builder, y: gs.Tensor, dtype: np.dtype) -> gs.Tensor:
    return b.cast(y, dtype) if dtype != np.float32 and dtype.kind == "f" else y


# ------------------------------------------------------------------ pooling
def _adaptive_pool(mode: str) -> Callable[[gs.Node, Args, Context], list[gs.Tensor]]:
    def run(node: gs.Node, args: Args, ctx: Context) -> list[gs.Tensor]:
        x, out_size = args["self"], list(args["output_size"])
        if len(node.outputs) > 1 and (node.outputs[1].outputs or node.outputs[1] in ctx.graph.outputs):
            raise Skip("the indices output of adaptive max pooling is used; ONNX MaxPool indices differ from PyTorch's")
        n = len(out_size)
        dims = list(x.shape) if x.shape is not None else []
        if len(dims) <= n or not all(isinstance(d, int) and d >= 0 for d in dims[-n:]):
            raise Skip("adaptive pooling needs static spatial dims (export with a fixed input size)")
        if len(dims) not in (n + 1, n + 2):
            raise Skip(f"adaptive pooling over {n} axes takes rank {n + 1} or {n + 2}, not {len(dims)}")
        spatial = [int(d) for d in dims[-n:]]
        dtype = _dtype(x, f"adaptive_{mode}_pool{n}d")
        b = ctx.builder
        y = _to_float(b, x, dtype) if mode == "avg" else x
        unbatched = len(dims) == n + 1
        y = b.unsqueeze(y, [0]) if unbatched else y  # ONNX pools want N, C, spatial...
        y = _pool(b, y, spatial, out_size, mode, reduce_mean_reads_axes(ctx))
        y = b.squeeze(y, [0]) if unbatched else y
        return [_back(b, y, dtype) if mode == "avg" else y]

    return run


def _pool(b: Builder, x: gs.Tensor, spatial: list[int], out_size: list[int], mode: str, axes_input_ok: bool) -> gs.Tensor:
    """Adaptive pooling of N, C, spatial... ``x``: one pool if every axis divides, else axis by axis."""
    n = len(spatial)
    uniform = [i % o == 0 for i, o in zip(spatial, out_size, strict=True)]
    if all(uniform):
        return _uniform_pool(b, x, [i // o for i, o in zip(spatial, out_size, strict=True)], mode)
    y = x
    for a, (i, o) in enumerate(zip(spatial, out_size, strict=True)):
        if i == o:
            continue
        if uniform[a]:
            kernel = [1] * n
            kernel[a] = i // o
            y = _uniform_pool(b, y, kernel, mode)
        elif mode == "avg" and a >= n - 2:
            y = _average_matmul(b, y, a == n - 1, i, o)
        else:
            y = _bins(b, y, 2 + a, n, i, o, mode, axes_input_ok)
    return y


def _average_matmul(b: Builder, x: gs.Tensor, last: bool, in_size: int, out_size: int) -> gs.Tensor:
    """Averages over PyTorch's windows of the last or second-to-last axis as one MatMul with a
    [out, in] matrix of 1/len (2-4x faster than per-window Slice + ReduceMean on onnxruntime)."""
    weights = np.zeros((out_size, in_size), np.float32)
    for i, (start, end) in enumerate(pool_bins(in_size, out_size)):
        weights[i, start:end] = 1.0 / (end - start)
    if last:
        return b.op("MatMul", [x, b.const(np.ascontiguousarray(weights.T), hint="bins")])
    return b.op("MatMul", [b.const(weights, hint="bins"), x])


def _uniform_pool(b: Builder, x: gs.Tensor, kernel: list[int], mode: str) -> gs.Tensor:
    """in = out * k: windows of k with stride k (kernel = in - (out - 1) * stride = k)."""
    if all(k == 1 for k in kernel):
        return x
    return b.op("AveragePool" if mode == "avg" else "MaxPool", [x], {"kernel_shape": kernel, "strides": kernel})


def _bins(b: Builder, x: gs.Tensor, axis: int, n: int, in_size: int, out_size: int, mode: str, axes_input_ok: bool) -> gs.Tensor:
    """PyTorch's windows along one axis: Slice + a reduction of each window, then Concat."""
    parts = []
    for start, end in pool_bins(in_size, out_size):
        window = x if (start, end) == (0, in_size) else b.slice(x, [start], [end], axes=[axis])
        parts.append(_reduce_window(b, window, axis, n, end - start, mode, axes_input_ok))
    return parts[0] if len(parts) == 1 else b.concat(parts, axis)


def _reduce_window(b: Builder, window: gs.Tensor, axis: int, n: int, length: int, mode: str, axes_input_ok: bool) -> gs.Tensor:
    """Mean/max of a window along ``axis``. At opset >= 18 ReduceMean/ReduceMax take their axes as an
    input, which parsers before 10.0 ignore (they reduce over every axis): there the mean is
    ReduceSum (axes input read since opset 13) / length and the max a MaxPool over the window."""
    if b.opset < 18 or axes_input_ok:
        return b.reduce("ReduceMean" if mode == "avg" else "ReduceMax", window, [axis], keepdims=True)
    if mode == "avg":
        return b.op("Div", [b.reduce("ReduceSum", window, [axis], keepdims=True), np.array(length, np.float32)])
    kernel = [1] * n
    kernel[axis - 2] = length
    return b.op("MaxPool", [window], {"kernel_shape": kernel})


# ------------------------------------------------------------------ norms
def _standardize(b: Builder, x: gs.Tensor, first: int, eps: float, ctx: Context) -> gs.Tensor:
    """(x - mean) / sqrt(biased var + eps) over the axes ``[first, rank)`` (``first`` < 0), in float32."""
    axes = list(range(first, 0))
    return standardize(b, x, axes, element_count(x, first), eps, np.dtype(np.float32), reduce_mean_reads_axes(ctx)).normalized


def _per_channel(b: Builder, t: gs.Tensor, rank: int, ctx: Context) -> gs.Tensor:
    """A [C] parameter in float32, shaped [C, 1, ...] to broadcast over N, C, spatial..."""
    value = ctx.folder.value(t)
    if value is not None:
        return b.const(np.asarray(value, np.float32).reshape((-1,) + (1,) * (rank - 2)), hint="param")
    t32 = b.cast(t, np.float32) if tensor_dtype(t) != np.float32 else t
    return b.unsqueeze(t32, list(range(1, rank - 1))) if rank > 2 else t32


def _affine(b: Builder, y: gs.Tensor, weight: gs.Tensor | None, bias: gs.Tensor | None, shaped: Callable[[gs.Tensor], gs.Tensor]) -> gs.Tensor:
    if weight is not None:
        y = b.op("Mul", [y, shaped(weight)])
    if bias is not None:
        y = b.op("Add", [y, shaped(bias)])
    return y


def _layer_norm(node: gs.Node, args: Args, ctx: Context) -> list[gs.Tensor]:
    x, b = args["input"], ctx.builder
    dtype = _dtype(x, "layer_norm")
    k = len(args["normalized_shape"])

    def shaped(t: gs.Tensor) -> gs.Tensor:
        value = ctx.folder.value(t)
        if value is not None:
            return b.const(np.asarray(value, np.float32), hint="param")
        return b.cast(t, np.float32) if tensor_dtype(t) != np.float32 else t

    y = _standardize(b, b.cast(x, np.float32) if dtype != np.float32 else x, -k, float(args["eps"]), ctx)
    y = _affine(b, y, args["weight"], args["bias"], shaped)
    return [b.cast(y, dtype) if dtype != np.float32 else y]


def _group_norm(node: gs.Node, args: Args, ctx: Context) -> list[gs.Tensor]:
    x, b = args["input"], ctx.builder
    rank, dtype = _rank(x, "group_norm"), _dtype(x, "group_norm")
    groups = int(args["num_groups"])
    xf = b.cast(x, np.float32) if dtype != np.float32 else x
    grouped = b.reshape(xf, np.array([0, groups, -1], np.int64))
    y = b.reshape(_standardize(b, grouped, -1, float(args["eps"]), ctx), b.shape(x))
    y = _affine(b, y, args["weight"], args["bias"], lambda t: _per_channel(b, t, rank, ctx))
    return [b.cast(y, dtype) if dtype != np.float32 else y]


def _instance_norm(node: gs.Node, args: Args, ctx: Context) -> list[gs.Tensor]:
    x, b = args["input"], ctx.builder
    rank, dtype = _rank(x, "instance_norm"), _dtype(x, "instance_norm")
    xf = b.cast(x, np.float32) if dtype != np.float32 else x
    eps = float(args["eps"])
    if bool(args["use_input_stats"]):
        y = _standardize(b, xf, 2 - rank, eps, ctx)
    else:
        if args["running_mean"] is None or args["running_var"] is None:
            raise Skip("instance_norm without input statistics needs running_mean and running_var")
        mean, var = (_per_channel(b, args[k], rank, ctx) for k in ("running_mean", "running_var"))
        y = b.op("Div", [b.op("Sub", [xf, mean]), b.op("Sqrt", [b.op("Add", [var, np.array(eps, np.float32)])])])
    y = _affine(b, y, args["weight"], args["bias"], lambda t: _per_channel(b, t, rank, ctx))
    return [b.cast(y, dtype) if dtype != np.float32 else y]


# ------------------------------------------------------------------ elementwise / layout
def _clamp(node: gs.Node, args: Args, ctx: Context) -> list[gs.Tensor]:
    x, b = args["self"], ctx.builder
    dtype = _dtype(x, "clamp")
    declared = tensor_dtype(node.outputs[0])
    if declared is not None and declared != dtype:
        raise Skip(f"clamp of {dtype} returns {declared} (type promotion by a bound): not rewritten")
    y: gs.Tensor = x
    for op, bound in (("Max", args["min"]), ("Min", args["max"])):
        if bound is None:
            continue
        if isinstance(bound, gs.Tensor):
            operand = bound if tensor_dtype(bound) == dtype else b.cast(bound, dtype)
        else:
            operand = b.const(np.asarray(bound).astype(dtype), hint=op.lower())
        y = b.op(op, [y, operand])
    if y is x:
        y = b.op("Identity", [x])
    return [y]


def _pixel(upscale: bool) -> Callable[[gs.Node, Args, Context], list[gs.Tensor]]:
    def run(node: gs.Node, args: Args, ctx: Context) -> list[gs.Tensor]:
        x, b = args["self"], ctx.builder
        r = int(args["upscale_factor" if upscale else "downscale_factor"])
        dims = list(x.shape) if x.shape is not None else []
        if len(dims) != 4 or not all(isinstance(d, int) and d >= 0 for d in dims[2:]):
            raise Skip("pixel_shuffle/pixel_unshuffle is rewritten for rank-4 inputs with static H, W")
        h, w = dims[2], dims[3]
        if upscale:
            y = b.reshape(x, np.array([0, -1, r, r, h, w], np.int64))
            y = b.transpose(y, [0, 1, 4, 2, 5, 3])
            return [b.reshape(y, np.array([0, -1, h * r, w * r], np.int64))]
        y = b.reshape(x, np.array([0, -1, h // r, r, w // r, r], np.int64))
        y = b.transpose(y, [0, 1, 3, 5, 2, 4])
        return [b.reshape(y, np.array([0, -1, h // r, w // r], np.int64))]

    return run


REWRITES: dict[str, Callable[[gs.Node, Args, Context], list[gs.Tensor]]] = {
    **{f"{prefix}adaptive_{kind}_pool{n}d": _adaptive_pool(kind) for prefix in ("", "_") for kind in ("avg", "max") for n in (1, 2, 3)},
    "layer_norm": _layer_norm, "group_norm": _group_norm, "instance_norm": _instance_norm, "clamp": _clamp, "clip": _clamp,
    "pixel_shuffle": _pixel(True), "pixel_unshuffle": _pixel(False),
}

PASS = Pass(
    name="aten-fallback",
    summary="Rewrite ATen fallback nodes (adaptive pooling, layer/group/instance norm, clamp, pixel shuffle) into standard ONNX ops.",
    ops=frozenset({"ATen"}),
    rules=(
        Rule(NO_IMPORTER, "all", "ATen node from torch.onnx ONNX_ATEN_FALLBACK: no TensorRT release imports it", _is_aten,
             error="aten-fallback-node", evidence="operator table (no ATen op in any release); onnx/onnx-tensorrt#217"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    domains=frozenset({"", "ai.onnx", ATEN_DOMAIN}),
)
