"""contrib-matmul-lower: onnxruntime's fused MatMul / Conv / Gemm as standard ONNX.

Why: onnxruntime's optimizer (and models saved after its level-2 optimisations, e.g. with
``optimized_model_filepath``) writes ``com.microsoft`` ``FusedMatMul`` / ``TransposeMatMul`` (a
MatMul with its operands' Transposes and a scale folded in), ``FusedConv`` (Conv + activation,
with an optional residual input ``Z``) and ``FusedGemm`` (Gemm + activation). No TensorRT release
has an importer for them: the parser looks importers up by op type (``ModelImporter.cpp``) and
falls back to a plugin that does not exist ("Plugin not found").

How (semantics from the schemas onnxruntime registers and ContribOperators.md):

* ``FusedMatMul(A, B)`` / ``TransposeMatMul``: ``alpha * MatMul(A', B')`` where ``A'`` swaps A's last
  two axes when ``transA`` (likewise B); ``alpha`` 1 writes no Mul.
* ``FusedConv(X, W, B?, Z?)``: ``act(Conv(X, W, B) (+ Z))`` with the Conv attributes kept.
* ``FusedGemm(A, B, C?)``: ``act(Gemm(A, B, C))`` with the Gemm attributes kept.
* ``act``: Relu, Tanh, Sigmoid, LeakyRelu (alpha), HardSigmoid (alpha, beta), Clip (min, max), from
  ``activation_params`` (FusedConv) or ``activation_alpha``/``activation_beta`` (FusedGemm).

Cost (``bench/contrib_latency.py``, onnxruntime CPU, 1 thread, lowered / native): FusedMatMul
12x128x64 by its transpose with alpha 0.99-1.00x, FusedConv 1x64x56x56 3x3 + Relu 0.99-1.00x
(onnxruntime fuses both back).

Left out (findings): ``transBatchA``/``transBatchB`` (batch-axis transposes), an activation other
than the six above, a transposed operand of unknown rank.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, optional_input, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._contrib import NO_CONTRIB_IMPORTER, float_type, replace_typed
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule

_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_GEMM_ATTRS = ("alpha", "beta", "transA", "transB")


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _activation(b: Builder, y: gs.Tensor, name: str, params: list[float], opset: int) -> gs.Tensor:
    """onnxruntime's fused activations (MLAS's activation kinds), with their parameters."""
    if name in ("Relu", "Tanh", "Sigmoid"):
        return b.op(name, [y])
    if name == "LeakyRelu":
        return b.op("LeakyRelu", [y], {"alpha": params[0] if params else 0.01})
    if name == "HardSigmoid":
        alpha, beta = (params + [0.2, 0.5][len(params):])[:2]
        return b.op("HardSigmoid", [y], {"alpha": alpha, "beta": beta})
    if name == "Clip" and len(params) == 2:
        if opset >= 11:
            dtype = tensor_dtype(y) or np.dtype(np.float32)
            return b.op("Clip", [y, np.array(params[0], dtype), np.array(params[1], dtype)])
        return b.op("Clip", [y], {"min": params[0], "max": params[1]})
    raise Skip(f"fused activation {name!r} (params {params}) is not lowered")


def _trans(b: Builder, x: gs.Tensor) -> gs.Tensor:
    rank = len(x.shape) if x.shape is not None else None
    if rank is None:
        raise Skip("a transposed operand has unknown rank (run shape inference upstream)")
    if rank < 2:
        return x
    return b.transpose(x, list(range(rank - 2)) + [rank - 1, rank - 2])


def _fused_matmul(node: gs.Node, ctx: Context) -> gs.Tensor:
    b, attrs = ctx.builder, node.attrs
    if int(attrs.get("transBatchA", 0)) or int(attrs.get("transBatchB", 0)):
        raise Skip("transBatchA/transBatchB are not lowered")
    a, w = node.inputs[0], node.inputs[1]
    a = _trans(b, a) if int(attrs.get("transA", 0)) else a
    w = _trans(b, w) if int(attrs.get("transB", 0)) else w
    y = b.op("MatMul", [a, w])
    alpha = float(attrs.get("alpha", 1.0))
    if alpha != 1.0:
        y = b.op("Mul", [y, np.array(alpha, float_type(node, 0, 1))])
    return y


def _fused_conv(node: gs.Node, ctx: Context) -> gs.Tensor:
    b = ctx.builder
    name = _text(node.attrs.get("activation", ""))
    params = [float(v) for v in node.attrs.get("activation_params", [])]
    ins = node.inputs[:3] if optional_input(node, 2) is not None else node.inputs[:2]
    y = b.op("Conv", list(ins), {k: node.attrs[k] for k in _CONV_ATTRS if k in node.attrs})
    z = optional_input(node, 3)
    if z is not None:
        y = b.op("Add", [y, z])
    return _activation(b, y, name, params, ctx.opset) if name else y


def _fused_gemm(node: gs.Node, ctx: Context) -> gs.Tensor:
    b = ctx.builder
    name = _text(node.attrs.get("activation", ""))
    params = [float(node.attrs[k]) for k in ("activation_alpha", "activation_beta") if k in node.attrs]
    ins = [t for t in node.inputs[:3] if t.name]
    y = b.op("Gemm", ins, {k: node.attrs[k] for k in _GEMM_ATTRS if k in node.attrs})
    return _activation(b, y, name, params, ctx.opset) if name else y


_REWRITES = {"FusedMatMul": _fused_matmul, "TransposeMatMul": _fused_matmul, "FusedConv": _fused_conv,
             "FusedGemm": _fused_gemm}


def rewrite(node: gs.Node, ctx: Context) -> None:
    replace_typed(ctx.graph, node.outputs[0], _REWRITES[node.op](node, ctx), float_type(node, 0, 1, 2))


PASS = Pass(
    name="contrib-matmul-lower",
    summary="Lower onnxruntime's FusedMatMul/TransposeMatMul, FusedConv and FusedGemm to MatMul/Conv/Gemm + activation.",
    ops=frozenset(_REWRITES),
    rules=(
        Rule(NO_IMPORTER, "all", "onnxruntime contrib op: no TensorRT importer (plugin fallback fails)",
             error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    domains=frozenset({"com.microsoft"}),
)
