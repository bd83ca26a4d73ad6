"""What the normalization decompositions share (layernorm, groupnorm, rmsnorm, aten-fallback's
native_layer_norm): the float/stash type checks and the two-pass standardization, with ReduceSum
/ count where a parser before 10.0 would ignore ReduceMean's axes input. Here so that no pass
module imports another."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.onnxio.validate import MAX_RANK
from graphfix.passes._axis import checked_axis
from graphfix.passes.base import Context
from graphfix.trt.versions import TrtVersion

#: First parser whose ReduceMean/ReduceMax/... importers read an ``axes`` input (opset >= 18).
AXES_INPUT = TrtVersion("10.0")
_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_INT_MAX = np.iinfo(np.int64).max


def float_dtype(x: gs.Tensor) -> np.dtype:
    dtype = tensor_dtype(x)
    if dtype is None:
        raise Skip("input type is unknown (run shape inference upstream)")
    if dtype not in _FLOATS:
        raise Skip(f"{dtype} input is not decomposed (fp16/fp32/fp64 only)")
    return dtype


def stash_dtype(node: gs.Node) -> np.dtype:
    """The statistics' type: float32 (``stash_type`` 1, the default); others are not decomposed."""
    stash = int(node.attrs.get("stash_type", 1))
    if stash != 1:
        raise Skip(f"stash_type {stash} (only 1, float32 statistics, is decomposed)")
    return np.dtype(np.float32)


@dataclass(frozen=True)
class Moments:
    normalized: gs.Tensor
    mean: gs.Tensor
    std: gs.Tensor  # sqrt(var + epsilon)


def reduce_mean_reads_axes(ctx: Context) -> bool:
    """Whether an opset >= 18 ReduceMean (axes as input) is safe for the target."""
    return ctx.trt is not None and ctx.trt >= AXES_INPUT


def first_axis(node: gs.Node, x: gs.Tensor) -> int:
    """The first normalised axis of ``x`` counted from the end (the axes are ``[first, 0)``), from
    the node's ``axis`` (default -1). Out of ``[-rank, rank)`` (onnxruntime refuses it) or, at an
    unknown rank, non-negative or beyond any tensor's rank: Skip, a finding, never a rewrite (an
    ``axis`` of -2147483649 made a list of 2**31 axes)."""
    if x.shape is not None:
        return checked_axis(node, len(x.shape), -1) - len(x.shape)
    axis = int(node.attrs.get("axis", -1))
    if axis >= 0:
        raise Skip("input rank is unknown and axis is not negative (run shape inference upstream)")
    if axis < -MAX_RANK:
        raise Skip(f"axis {axis} is beyond any tensor's rank (at most {MAX_RANK})")
    return axis


def element_count(x: gs.Tensor, first: int) -> int | None:
    """Number of elements in ``x``'s axes from ``first`` on (Python slicing), if static."""
    dims = x.shape[first:] if x.shape is not None else None
    if dims is None or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in dims):
        return None
    return int(np.prod(dims, dtype=np.int64))


def standardize(b: Builder, x: gs.Tensor, axes: list[int], count: int | None, eps: float, dtype: np.dtype,
                axes_input_ok: bool) -> Moments:
    """(x - mean) / sqrt(mean((x - mean) ** 2) + eps) over ``axes`` (negative, the trailing ones).

    ``count`` is the number of reduced elements (None: computed from ``x``'s shape at runtime);
    it is only needed where ReduceMean cannot be used (opset >= 18 and parsers before 10.0).
    """
    reduce_mean = uses_reduce_mean(b, axes_input_ok)
    mean = mean_over(b, x, axes, count, dtype, axes_input_ok)
    mu = mean(x)
    dev = b.op("Sub", [x, mu], dtype=dtype)
    # Pow(D, 2) completes the pattern LayerNorm fusions look for; without ReduceMean there is no
    # such pattern, and Mul(D, D) is the cheaper square (onnxruntime's Pow is a generic pow()).
    square = b.op("Pow", [dev, np.array(2, dtype)], dtype=dtype) if reduce_mean else b.op("Mul", [dev, dev], dtype=dtype)
    var = mean(square)
    std = b.op("Sqrt", [b.op("Add", [var, np.array(eps, dtype)], dtype=dtype)], dtype=dtype)
    return Moments(b.op("Div", [dev, std], dtype=dtype), mu, std)


def uses_reduce_mean(b: Builder, axes_input_ok: bool) -> bool:
    """ReduceMean is safe: its axes are an attribute (opset < 18) or the target reads the input."""
    return b.opset < 18 or axes_input_ok


def mean_over(b: Builder, x: gs.Tensor, axes: list[int], count: int | None, dtype: np.dtype,
              axes_input_ok: bool) -> Callable[[gs.Tensor], gs.Tensor]:
    """A function taking the mean of a tensor shaped like ``x`` over ``axes`` (negative, the trailing
    ones): ReduceMean where the target reads its axes, else ReduceSum / element count (``count``, or
    computed once from ``x``'s shape at runtime)."""
    divisor: list[gs.Tensor | np.ndarray] = []

    def mean(t: gs.Tensor) -> gs.Tensor:
        if uses_reduce_mean(b, axes_input_ok):
            return b.reduce("ReduceMean", t, axes, dtype=dtype)
        if not divisor:
            divisor.append(np.array(count, dtype) if count is not None else _runtime_count(b, x, axes[0], dtype))
        return b.op("Div", [b.reduce("ReduceSum", t, axes, dtype=dtype), divisor[0]], dtype=dtype)

    return mean


def _runtime_count(b: Builder, x: gs.Tensor, first: int, dtype: np.dtype) -> gs.Tensor:
    """prod(shape(x)[first:]) as a ``dtype`` scalar (ReduceProd without axes reduces everything)."""
    dims = b.cast(b.slice(b.shape(x), [first], [_INT_MAX], axes=[0]), dtype)
    return b.op("ReduceProd", [dims], {"keepdims": 0}, dtype=dtype)
