"""gridsample-decompose: GridSample as a gather-based sampler (nearest / linear / cubic, 4-D and 5-D).

Why, per release:

* < 8.5: no GridSample importer at all ("No importer registered for op: GridSample").
* >= 8.5: the parser maps GridSample onto ``IGridSampleLayer``, which takes rank-4 input only;
  a volumetric (5-D, opset 20) GridSample fails with "addGridsample: Error Code 3: API Usage
  Error" (NVIDIA/TensorRT#4618, #2738; the 10.1+ operator table says "Only rank-4").
* >= 8.5: the importer only knows the opset-16 mode names ``bilinear``/``bicubic``. Opset 20
  renamed them ``linear``/``cubic``, and every parser read so far (8.5, 8.6, 10.1 source; 11.1
  reproduced in onnx/onnx-tensorrt#1060, NVIDIA/TensorRT#4646) silently samples **nearest**.

Renaming the mode back to ``bilinear`` was considered for the opset-20 4-D case and rejected:
at opset 20 the only valid names are ``linear``/``nearest``/``cubic`` (onnxruntime refuses to load
``bilinear`` at opset 20: "mode "bilinear" not supported, expect linear, nearest or cubic"), the
model's opset must stay, and a node cannot carry its own opset outside a local function (which
old parsers do not inline). So the renamed model would be invalid ONNX that nothing can verify;
the node is decomposed instead, which is valid at every opset and exact.

How (spatial rank D = 2 or 3, P output points, T taps per axis: 1 nearest, 2 linear, 4 cubic),
following onnxruntime's kernel (which is what verification compares against):

1. grid -> ``[D, N, P]`` (component 0 is x, the last spatial axis; per-axis constants then vary
   along outer axes only, so every elementwise op streams over P); unnormalise with onnxruntime's
   float operation order (``((g+1)*L-1)/2``, or ``(g+1)/2*(L-1)`` with align_corners).
2. nearest: round half to even (the spec's and onnxruntime's ``nearbyint``) as Floor plus a tie
   correction, since Round has no importer before 8.2.
3. taps ``floor(x) + {0,1}`` / ``{-1..2}`` per axis (``[D, T, N, P]``), weights ``1-|x-tap|`` or
   Keys' cubic (A = -0.75) in onnxruntime's Horner form. Padding acts on each tap index, as in
   onnxruntime and PyTorch: ``border`` clamps, ``reflection`` folds by the borders (-0.5 / L-0.5,
   or 0 / L-1), ``zeros`` clamps and folds a 0/1 validity mask into the weight. Flat index = sum
   of tap * stride (+ n*L for image n); indices and weights are broadcast over the D tap axes to
   ``[T^D, N*P]``. (The ONNX reference clamps the *coordinate* first for ``border``; that only
   changes cubic, where onnxruntime and PyTorch clamp taps; this pass follows them.)
4. x -> rows ``[N*L, C]`` (one Transpose), one ``Gather`` of whole C-rows, ``Mul`` by the weights
   and ``ReduceSum`` over the taps, Reshape to ``[N, *grid dims, C]``, one Transpose to
   ``[N, C, *grid dims]``.

Layout measured with ``bench/gridsample_latency.py`` (onnxruntime CPU, 1 thread, best of 20):
SuperPoint descriptor sampling (C = 256) costs 0.54x the native op; gathering single elements
from channel planes instead (no Transpose) cost 1.08x. A batched ``[1, T^D] @ [T^D, C]`` MatMul
for the tap sum is faster on onnxruntime for C >= 16 (0.42x SuperPoint) but 1.5x slower at C = 3,
and on TensorRT it is a batched M = 1 GEMM (not measured: no GPU here); Mul + ReduceSum is the
one path. Few channels and many points (a C = 3 flow warp, 2x96x128 points) cost 3.6x native:
the ~20 elementwise ops of index math per point are no longer amortised over channels.

Per-axis tap coordinates are float32 (exact below 2^24), cast to INT32 before the flat index. fp16 input is
gathered in fp16 and interpolated in fp32, like onnxruntime (which runs fp16 GridSample in fp32).
Every op used is imported by 8.0 (Range only for a dynamic batch size).
Not handled (left as findings): cubic on 5-D (not defined by onnxruntime), spatial rank other than
2/3, unknown rank or non-float types. Non-finite data with ``zeros`` padding: an out-of-range tap
reads a clamped in-range element times a 0 weight, so an inf/NaN there leaks where GridSample gives 0.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import LIMIT, NO_IMPORTER, WRONG_RESULTS, Context, Pass, Rule

#: Keys' cubic convolution coefficient used by the ONNX reference and onnxruntime.
CUBIC_A = -0.75
#: Tap offsets per axis.
TAPS = {"nearest": (0,), "linear": (0, 1), "cubic": (-1, 0, 1, 2)}
_MODES = {"bilinear": "linear", "linear": "linear", "bicubic": "cubic", "cubic": "cubic", "nearest": "nearest"}
F32 = np.float32


def _attr(node: gs.Node, name: str, default: str) -> str:
    value = node.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _mode(node: gs.Node) -> str:
    return _attr(node, "mode", "linear")  # the default samples linearly at every opset


def _not_rank4(node: gs.Node, ctx: Context) -> bool:
    shape = node.inputs[0].shape or node.inputs[1].shape
    return shape is not None and len(shape) != 4


def _opset20_name(node: gs.Node, ctx: Context) -> bool:
    """An explicit opset-20 name (an absent mode is read as "bilinear" by the importer: right)."""
    return "mode" in node.attrs and _mode(node) in ("linear", "cubic")


# ------------------------------------------------------------------ rewrite
def rewrite(node: gs.Node, ctx: Context) -> None:
    x, grid, y = node.inputs[0], node.inputs[1], node.outputs[0]
    shape = x.shape if x.shape is not None else grid.shape
    if shape is None:
        raise Skip("input rank is unknown (run shape inference upstream)")
    dims = len(shape) - 2
    mode = _MODES.get(_mode(node))
    padding = _attr(node, "padding_mode", "zeros")
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise Skip(f"unknown mode {_mode(node)!r} / padding_mode {padding!r}")
    if dims not in (2, 3):
        raise Skip(f"spatial rank {dims}: only 4-D and 5-D GridSample are decomposed")
    if mode == "cubic" and dims != 2:
        raise Skip("cubic GridSample is only defined for 4-D input")
    dtype = tensor_dtype(x)
    if dtype is None or dtype.kind != "f":
        raise Skip("input type is unknown or not floating point")
    sampler = _Sampler(ctx.builder, x, grid, dims, mode, padding, bool(node.attrs.get("align_corners", 0)), dtype)
    replace_tensor(ctx.graph, y, sampler.build())


class _Sampler:
    """Builds the decomposition of one GridSample node."""

    def __init__(self, b: Builder, x: gs.Tensor, grid: gs.Tensor, dims: int, mode: str, padding: str,
                 align: bool, dtype: np.dtype) -> None:
        self.b, self.x, self.grid, self.dims = b, x, grid, dims
        self.mode, self.padding, self.align, self.dtype = mode, padding, align, dtype
        self.ct = np.dtype(np.float64) if np.float64 in (dtype, tensor_dtype(grid)) else np.dtype(F32)
        spatial = list((x.shape or [None] * (dims + 2))[2:])
        self.static_sizes = [int(d) for d in spatial] if all(isinstance(d, (int, np.integer)) and d > 0 for d in spatial) else None

    # ---------------------------------------------------------- sizes
    def _c(self, value: object, hint: str = "const") -> gs.Constant:
        return self.b.const(np.asarray(value, self.ct), hint=hint)

    def _sizes(self) -> tuple[gs.Tensor, gs.Tensor, gs.Tensor]:
        """Spatial sizes in grid-component order (x first) as [D, 1, 1] float, [D, 1, 1, 1] int32
        strides and L = their product as int32."""
        b, d = self.b, self.dims
        if self.static_sizes is not None:
            rev = self.static_sizes[::-1]
            strides = np.cumprod([1, *rev]).astype(np.int32)
            return (self._c(np.reshape(rev, (d, 1, 1)), "sizes"), b.const(strides[:d].reshape(d, 1, 1, 1), hint="strides"),
                    b.const(strides[d:], hint="length"))
        rev_int = b.op("Gather", [b.shape(self.x), np.arange(d + 1, 1, -1, dtype=np.int64)], {"axis": 0}, dtype=np.int64)
        parts: list[gs.Tensor] = [b.const(np.ones(1, np.int64))]
        for k in range(d):
            parts.append(b.op("Mul", [parts[-1], b.slice(rev_int, [k], [k + 1])]))
        strides = b.cast(b.concat(parts, 0), np.int32)  # [1, W, W*H, (W*H*D)]
        sizes = b.reshape(b.cast(rev_int, self.ct), np.array([d, 1, 1], np.int64))
        return sizes, b.reshape(b.slice(strides, [0], [d]), np.array([d, 1, 1, 1], np.int64)), b.slice(strides, [d], [d + 1])

    # --------------------------------------------------------- build
    def build(self) -> gs.Tensor:
        """Per-axis work is laid out [D, (T,) N, P]: every broadcast constant varies along the
        outer axes only, so elementwise ops stream over the long P axis."""
        b, d = self.b, self.dims
        sizes, strides, length = self._sizes()
        g = self.grid if tensor_dtype(self.grid) == self.ct else b.cast(self.grid, self.ct)
        g = b.transpose(b.reshape(g, np.array([0, -1, d], np.int64)), [2, 0, 1])  # [D, N, P]
        coord = self._unnormalize(g, sizes)
        if self.mode == "nearest":
            coord = _round_half_even(b, coord, self.ct)
        col = b.unsqueeze(coord, [1])  # [D, 1, N, P]
        size_col = b.unsqueeze(sizes, [1])  # [D, 1, 1, 1]
        offsets = np.asarray(TAPS[self.mode], self.ct).reshape(-1, 1, 1)
        base = col if self.mode == "nearest" else b.op("Add", [b.op("Floor", [col]), offsets])  # [D, T, N, P]
        weights = None if self.mode == "nearest" else self._weights(col, base)
        index, weights = self._tap_index(base, size_col, weights)
        flat = b.op("Mul", [b.cast(index, np.int32), strides])
        image = None if self._batch() == 1 else b.op("Mul", [self._arange(), length])  # image n's rows start at n*L
        return self._gather(self._combine(flat, "Add", image), None if weights is None else self._combine(weights, "Mul"))

    def _batch(self) -> int | None:
        n = (self.x.shape or [None])[0]
        return int(n) if isinstance(n, (int, np.integer)) and n > 0 else None

    def _unnormalize(self, g: gs.Tensor, sizes: gs.Tensor) -> gs.Tensor:
        b = self.b
        plus = b.op("Add", [g, self._c(1.0)])
        if self.align:  # (g + 1) / 2 * (L - 1)
            return b.op("Mul", [b.op("Mul", [plus, self._c(0.5)]), b.op("Sub", [sizes, self._c(1.0)])])
        return b.op("Mul", [b.op("Sub", [b.op("Mul", [plus, sizes]), self._c(1.0)]), self._c(0.5)])

    def _bounds(self, sizes: gs.Tensor) -> tuple[gs.Tensor, gs.Tensor]:
        if self.align:
            return self._c(0.0), self.b.op("Sub", [sizes, self._c(1.0)])
        return self._c(-0.5), self.b.op("Sub", [sizes, self._c(0.5)])

    def _reflect(self, v: gs.Tensor, lo: gs.Tensor, hi: gs.Tensor) -> gs.Tensor:
        """hi - |((v - lo) mod 2R) - R| with R = hi - lo: reflection by the borders until inside."""
        b = self.b
        span = b.op("Sub", [hi, lo])
        period = b.op("Max", [b.op("Mul", [span, self._c(2.0)]), self._c(1.0)])  # R = 0 only for L = 1 with align_corners
        d = b.op("Sub", [v, lo])
        folded = b.op("Sub", [d, b.op("Mul", [period, b.op("Floor", [b.op("Div", [d, period])])])])
        return b.op("Sub", [hi, b.op("Abs", [b.op("Sub", [folded, span])])])

    def _weights(self, col: gs.Tensor, taps: gs.Tensor) -> gs.Tensor:
        b = self.b
        dist = b.op("Abs", [b.op("Sub", [col, taps])])  # [D, T, N, P]
        if self.mode == "linear":
            return b.op("Sub", [self._c(1.0), dist])
        a = CUBIC_A  # onnxruntime's Horner forms: near taps (|s| <= 1) and far taps (1 < |s| < 2)
        near = b.op("Add", [b.op("Mul", [b.op("Mul", [b.op("Sub", [b.op("Mul", [dist, self._c(a + 2)]), self._c(a + 3)]), dist]), dist]), self._c(1.0)])
        far = b.op("Mul", [b.op("Sub", [b.op("Mul", [dist, self._c(a)]), self._c(5 * a)]), dist])
        far = b.op("Sub", [b.op("Mul", [b.op("Add", [far, self._c(8 * a)]), dist]), self._c(4 * a)])
        inner, outer = self._c(np.reshape([0, 1, 1, 0], (4, 1, 1))), self._c(np.reshape([1, 0, 0, 1], (4, 1, 1)))
        return b.op("Add", [b.op("Mul", [near, inner]), b.op("Mul", [far, outer])])

    def _tap_index(self, taps: gs.Tensor, size_col: gs.Tensor, weights: gs.Tensor | None) -> tuple[gs.Tensor, gs.Tensor | None]:
        """In-range tap coordinates per padding mode; ``zeros`` folds validity into the weights."""
        b = self.b
        top = b.op("Sub", [size_col, self._c(1.0)])
        if self.padding == "reflection":
            lo, hi = self._bounds(size_col)
            taps = self._reflect(taps, lo, hi)
        index = _clip(b, taps, self._c(0.0), top)
        if self.padding == "zeros":
            valid = b.cast(b.op("Equal", [index, taps]), self.ct)
            weights = valid if weights is None else b.op("Mul", [weights, valid])
        return index, weights

    def _combine(self, per_axis: gs.Tensor, op: str, shift: gs.Tensor | None = None) -> gs.Tensor:
        """[D, T, N, P] -> [T^D, N*P]: tap axis of component k (x first) at position D-1-k, the
        others broadcast against it; ``shift`` [N, 1] is added to the outermost component."""
        b, d = self.b, self.dims
        t = len(TAPS[self.mode])
        total = None
        for k in reversed(range(d)):
            part = b.op("Gather", [per_axis, np.array(k, np.int64)], {"axis": 0})  # [T, N, P]
            if shift is not None and k == d - 1:
                part = b.op("Add", [part, shift])
            others = [j for j in range(d) if j != d - 1 - k]
            part = b.unsqueeze(part, others) if others else part
            total = part if total is None else b.op(op, [total, part])
        assert total is not None
        return b.reshape(total, np.array([t**d, -1], np.int64))

    def _gather(self, index: gs.Tensor, weights: gs.Tensor | None) -> gs.Tensor:
        """Rows of x as [N*L, C] gathered at the flat indices [T^D, N*P]; taps weighted and summed."""
        b = self.b
        taps = len(TAPS[self.mode]) ** self.dims
        rows = b.transpose(b.reshape(self.x, np.array([0, 0, -1], np.int64)), [0, 2, 1])  # [N, L, C]
        rows = b.reshape(rows, b.concat([b.const(np.array([-1], np.int64)), self._channels()], 0))  # [N*L, C]
        if taps == 1:
            index = b.reshape(index, np.array([-1], np.int64))
        picked = b.op("Gather", [rows, index], {"axis": 0})  # [(T^D,) N*P, C]
        if self.dtype != self.ct:
            picked = b.cast(picked, self.ct)
        if weights is not None:
            picked = b.op("Mul", [picked, b.reshape(weights, np.array([-1, 1] if taps == 1 else [taps, -1, 1], np.int64))])
        if taps > 1:
            picked = b.reduce("ReduceSum", picked, [0], keepdims=False)  # [N*P, C]
        picked = b.reshape(picked, self._out_shape())  # [N, *grid dims, C]
        out = b.transpose(picked, [0, self.dims + 1, *range(1, self.dims + 1)])
        return b.cast(out, self.dtype) if self.dtype != self.ct else out

    def _channels(self) -> gs.Tensor:
        c = (self.x.shape or [None, None])[1]
        if isinstance(c, (int, np.integer)) and c > 0:
            return self.b.const(np.array([c], np.int64))
        return self.b.slice(self.b.shape(self.x), [1], [2])

    def _arange(self) -> gs.Tensor:
        """[N, 1] int32 image numbers."""
        b, batch = self.b, self._batch()
        if batch is not None:
            return b.const(np.arange(batch, dtype=np.int32).reshape(-1, 1))
        n = b.cast(b.reshape(b.slice(b.shape(self.x), [0], [1]), np.array([], np.int64)), np.int32)
        count = b.op("Range", [np.array(0, np.int32), n, np.array(1, np.int32)], dtype=np.int32)
        return b.unsqueeze(count, [1])

    def _out_shape(self) -> gs.Tensor:
        """[N, *grid dims, C]."""
        b = self.b
        gdims = list((self.grid.shape or [None] * (self.dims + 2))[:-1])
        c = (self.x.shape or [None, None])[1]
        if all(isinstance(v, (int, np.integer)) and v >= 0 for v in [*gdims, c]):
            return b.const(np.array([*gdims, c], np.int64))
        return b.concat([b.slice(b.shape(self.grid), [0], [-1]), self._channels()], 0)


def _clip(b: Builder, x: gs.Tensor, lo: gs.Tensor, hi: gs.Tensor) -> gs.Tensor:
    """Min(Max(x, lo), hi): bounds may be computed tensors (Clip wants initializers before 8.2)."""
    return b.op("Min", [b.op("Max", [x, lo]), hi])


def _round_half_even(b: Builder, x: gs.Tensor, ct: np.dtype) -> gs.Tensor:
    """nearbyint(x) without Round (no importer before 8.2): floor, +1 above .5, +parity at .5."""
    f = b.op("Floor", [x])
    frac = b.op("Sub", [x, f])
    half = np.asarray(0.5, ct)
    up = b.cast(b.op("Greater", [frac, half]), ct)
    tie = b.cast(b.op("Equal", [frac, half]), ct)
    odd = b.op("Sub", [f, b.op("Mul", [b.op("Floor", [b.op("Mul", [f, half])]), np.asarray(2.0, ct)])])
    return b.op("Add", [b.op("Add", [f, up]), b.op("Mul", [tie, odd])])


PASS = Pass(
    name="gridsample-decompose",
    summary="Rewrite GridSample (no importer < 8.5, 5-D, opset-20 linear/cubic names) as an exact Gather sampler.",
    ops=frozenset({"GridSample"}),
    rules=(
        Rule(NO_IMPORTER, "<8.5", "no GridSample importer", error="gridsample-not-supported",
             evidence="operator table; importer source (first in 8.5-GA)"),
        Rule(LIMIT, ">=8.5", "GridSample on 5-D (volumetric) input: IGridSampleLayer takes rank 4 only", _not_rank4,
             evidence="NVIDIA/TensorRT#2738, #4618 (addGridsample API usage error); operator table 10.1+ 'Only rank-4'"),
        Rule(WRONG_RESULTS, ">=8.5", "opset-20 mode name linear/cubic is not recognised and samples nearest", _opset20_name,
             evidence="importer source 8.5-10.1 (only bilinear/bicubic/nearest); onnx/onnx-tensorrt#1060 (11.1), NVIDIA/TensorRT#4646"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
