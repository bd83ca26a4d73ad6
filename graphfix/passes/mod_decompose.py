"""mod-decompose: Mod as Div/Mul/Sub plus a sign fix-up, exact for integers.

Why: TensorRT parsers before 8.5 have no Mod importer ("No importer registered for op: Mod").
Exports emit it for Python ``%`` on integer tensors (dynamo: ``Mod(fmod=0)``; SAM's
window-partition padding ``(ws - H % ws) % ws``, YOLOv10's head) and for ``torch.fmod``
(``Mod(fmod=1)``). From 8.5 the importer exists but asserts integer inputs for ``fmod=0``
("Inputs cannot be of floating point types", 8.5-10.1 source), so the float floor-mod that
ONNX allows from opset 28 (Python ``%`` on float tensors as one node) is rejected by every
release.

Integer division is a fault line between runtimes: onnxruntime truncates, the ONNX reference
evaluator floored (onnx/onnx#7570), and TensorRT has both. Every release imports ONNX Div as
IElementWiseLayer kDIV (7.0-10.1, the Div importer in builtin_op_importers.cpp /
onnxOpImporters.cpp), and its own Mod importer (8.5-GA builtin_op_importers.cpp; 10.x
importerUtils.cpp ``modWithIntegerInputs``) computes ``fmod=1`` as ``a - b * kDIV(a, b)`` and
``fmod=0`` as ``a - b * kFLOOR_DIV(a, b)``: kDIV truncates on integers, kFLOOR_DIV floors. An
optimizer can also read integer algebra otherwise: onnxruntime's basic-level DivMulFusion turns
``Mul(y, Div(1, x))`` into ``Div(y, x)`` for integers too. So the integer form relies on neither:

* **Integers**, C remainder (the sign of ``a``): ``r = |a| + |b| * (0 - Div(|a|, |b|))``, then
  ``-r`` where ``a < 0``. The one Div has non-negative operands (truncation and floor agree),
  and its only consumer is a Sub: no Div feeds a Mul (a Swin dynamo export was off by 0.2 under
  a default onnxruntime session with the earlier ``a - b * Div(a, b)``). ``|t|`` is
  ``Where(t < 0, 0 - t, t)`` (the older releases' unary Abs takes no INT32); a constant
  divisor's magnitude is folded. Exact for every operand except the type's minimum.
* **Floats**, C remainder: ``q = trunc(a / b)`` as Floor/Ceil chosen by sign (there is no Trunc
  op), ``t = a - b * q``, and ``t = a`` where ``q == 0``, which also gives
  ``fmod(x, ±inf) = x`` as the spec says instead of ``inf * 0 = NaN``.
* ``fmod=0`` (Python/floor rule, the sign of ``b``): floats use ``q = Floor(a / b)``; both then
  get ``t + b`` where ``t != 0`` and its sign differs from ``b``'s (``Less``/``Greater``/``And``/
  ``Or``/``Where``: no product ``t * b`` that could overflow; one comparison when ``b`` is a
  constant of one sign), and float ``x % ±inf`` follows the spec's special cases.

Float results are ``a - b * q`` rounded, like TensorRT's own Mod importer (not correctly
rounded as C ``fmod`` is when ``|a / b|`` is large; the quotient can also round across an
integer when ``a / b`` is within an ulp of one). FP16/BF16 compute in FP32 and cast back, which
is what onnxruntime does; 8/16-bit and uint32 integers compute in INT32/INT64 (exact).
Signed zeros are not preserved. Every op used is imported by 7.0 (Where/Less/Greater/And/Or are
N in 5.1/6.0, so the rule starts at 7.0). A float ``fmod=0`` below opset 28 is invalid ONNX and
is left as a finding.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import NO_IMPORTER, TYPE, Context, Pass, Rule

#: Integer types computed in a wider signed type (ONNX Div/Less kernels and TensorRT lack them).
_WIDEN = {np.dtype(np.int8): np.int32, np.dtype(np.int16): np.int32, np.dtype(np.uint8): np.int32,
          np.dtype(np.uint16): np.int32, np.dtype(np.uint32): np.int64}
#: Float types computed in FP32.
_UPCAST = ("float16", "bfloat16")


def _float_floor_mod(node: gs.Node, ctx: Context) -> bool:
    dtype = tensor_dtype(node.inputs[0])
    return int(node.attrs.get("fmod", 0)) == 0 and dtype is not None and (dtype.kind == "f" or str(dtype) == "bfloat16")


def rewrite(node: gs.Node, ctx: Context) -> None:
    a, b_in = node.inputs[0], node.inputs[1]
    dtype = tensor_dtype(a)
    if dtype is None:
        raise Skip("input type is unknown (run shape inference upstream)")
    fmod = int(node.attrs.get("fmod", 0))
    is_float = dtype.kind == "f" or str(dtype) == "bfloat16"
    if is_float and fmod == 0 and ctx.opset < 28:
        raise Skip("fmod=0 on floats is invalid ONNX before opset 28 (the spec requires fmod=1)")
    ranks = [len(t.shape) if t.shape is not None else None for t in (a, b_in)]
    if None in ranks:
        raise Skip("input rank is unknown (run shape inference upstream)")
    rank = max(ranks)  # type: ignore[type-var]
    b = ctx.builder
    work = np.dtype(np.float32) if str(dtype) in _UPCAST else np.dtype(_WIDEN.get(dtype, dtype))
    x, y = (_widen(b, t, r, rank, work, dtype) for t, r in zip((a, b_in), ranks, strict=True))
    divisor = ctx.folder.value(b_in)
    if is_float:
        out = _float_mod(b, x, y, work, floor=fmod == 0)
    else:
        out = _int_remainder(b, x, y, work, divisor, rank)
    if fmod == 0 and dtype.kind != "u":
        out = _sign_fix(b, out, y, work, divisor)
    if work != dtype:
        out = b.cast(out, dtype)
    replace_tensor(ctx.graph, node.outputs[0], out)


def _widen(b: Builder, t: gs.Tensor, rank: int, target: int, work: np.dtype, dtype: np.dtype) -> gs.Tensor:
    """The operand at the output rank (TensorRT 7.x Where needs equal ranks) in the working type."""
    if rank < target:
        t = b.unsqueeze(t, list(range(target - rank)))
    return b.cast(t, work) if work != dtype else t


def _int_remainder(b: Builder, x: gs.Tensor, y: gs.Tensor, work: np.dtype, divisor: np.ndarray | None,
                   rank: int) -> gs.Tensor:
    """The C remainder (sign of ``x``) in a form no runtime or optimizer can read two ways.

    * The one integer Div divides ``|x|`` by ``|y|``: on non-negative operands truncation and
      floor agree, so it means the same in onnxruntime and TensorRT's kDIV (both truncate), the
      ONNX reference evaluator (floors) and TensorRT's kFLOOR_DIV.
    * The quotient reaches the Mul through ``0 - q`` (``r = |x| + |y| * (0 - q)``): no Div
      feeds a Mul, so onnxruntime's DivMulFusion (``Mul(y, Div(1, x)) -> Div(y, x)``, applied to
      integers too at its basic level, where ``|x|`` can fold to the constant 1) has nothing to
      fuse. Issue 22: the earlier ``x - y * Div(x, y)`` was off by 0.2 on a Swin export under a
      default session.
    * The sign comes back by Where: ``-r`` where ``x < 0``.

    Exact for every operand but the type's minimum (whose magnitude does not fit)."""
    zero = np.zeros((), work)
    signed = work.kind == "i"
    x_negative = b.op("Less", [x, zero]) if signed else None
    ax = _magnitude(b, x, x_negative, work) if x_negative is not None else x
    ay: gs.Tensor | np.ndarray = y
    if divisor is not None and divisor.size:
        ay = np.abs(divisor).astype(work) if signed else divisor.astype(work)
        ay = ay.reshape((1,) * (rank - ay.ndim) + ay.shape)  # every operand at the output rank (7.x Where)
    elif signed:
        ay = _magnitude(b, y, b.op("Less", [y, zero]), work)
    negated = b.op("Sub", [zero, b.op("Div", [ax, ay])])
    r = b.op("Add", [ax, b.op("Mul", [ay, negated])])
    return b.op("Where", [x_negative, b.op("Sub", [zero, r]), r]) if x_negative is not None else r


def _magnitude(b: Builder, t: gs.Tensor, negative: gs.Tensor, work: np.dtype) -> gs.Tensor:
    """|t| as Where(t < 0, 0 - t, t): TensorRT's unary Abs takes no INT32 on the older releases."""
    return b.op("Where", [negative, b.op("Sub", [np.zeros((), work), t]), t])


def _float_mod(b: Builder, x: gs.Tensor, y: gs.Tensor, work: np.dtype, floor: bool) -> gs.Tensor:
    """x - y * q with q = floor(x / y) or trunc(x / y); x itself where q == 0 (exact, and right for y = ±inf)."""
    ratio = b.op("Div", [x, y])
    if floor:
        q = b.op("Floor", [ratio])
    else:
        zero = np.zeros((), work)
        q = b.op("Where", [b.op("Less", [ratio, zero]), b.op("Ceil", [ratio]), b.op("Floor", [ratio])])
    rem = b.op("Sub", [x, b.op("Mul", [y, q])])
    return b.op("Where", [b.op("Equal", [q, np.zeros((), work)]), x, rem])


def _sign_fix(b: Builder, t: gs.Tensor, y: gs.Tensor, work: np.dtype, divisor: np.ndarray | None) -> gs.Tensor:
    """t + y where t != 0 and sign(t) != sign(y): the floor rule from the truncating one.
    A constant divisor of one sign (``x % 16``) needs one comparison instead of five nodes."""
    zero = np.zeros((), work)
    if divisor is not None and divisor.size and np.all(divisor > 0):
        differ = b.op("Less", [t, zero])
    elif divisor is not None and divisor.size and np.all(divisor < 0):
        differ = b.op("Greater", [t, zero])
    else:
        differ = b.op("Or", [
            b.op("And", [b.op("Less", [t, zero]), b.op("Greater", [y, zero])]),
            b.op("And", [b.op("Greater", [t, zero]), b.op("Less", [y, zero])]),
        ])
    return b.op("Where", [differ, b.op("Add", [t, y]), t])


PASS = Pass(
    name="mod-decompose",
    summary="Rewrite Mod (Python % / torch.fmod) into Div/Mul/Sub with a sign fix-up (exact for integers).",
    ops=frozenset({"Mod"}),
    rules=(
        Rule(NO_IMPORTER, ">=7.0,<8.5", "no Mod importer", error="mod-not-supported",
             evidence="operator table; importer source (first in 8.5.1)"),
        Rule(TYPE, ">=8.5", "Mod fmod=0 on floats (opset 28): the importer takes only integers for fmod=0",
             _float_floor_mod, error="mod-not-supported", evidence="importer source 8.5-10.1"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
