"""activation-decompose: Mish, HardSwish and Celu as the activations they are defined from.

Why: the parser has no importer for these in older releases ("No importer registered for op:
Mish", errors.json decomposable-op-missing), per the operator tables and importer sources:

* Mish (opset 18): none before 10.0-EA. ``nn.Mish`` (YOLOv4/v7 CSPDarknet, some timm nets) is
  one Mish node in dynamo exports (``aten_mish``) at opset >= 18.
* HardSwish (opset 14): none before 8.4 (importer from 8.4.1; 8.4-EA has none). ``nn.Hardswish``
  (MobileNetV3, EfficientViT, YOLOv5-era ``Hardswish``) is one node in legacy exports at opset >= 14
  and in dynamo exports.
* Celu (opset 12): not in the 7.0-7.2 tables (first in the 7.2 NGC 21.05 branch). ``nn.CELU`` is
  one Celu node in legacy exports at opset >= 12 and in dynamo exports.

Rewrite, each op's ONNX function body, in the input's float type (fp16 stays fp16, as the body
computes):

* Mish(x) = ``x * Tanh(Softplus(x))``.
* HardSwish(x) = ``x * HardSigmoid(x, alpha=1/6, beta=0.5)``.
* Celu(x) = ``alpha * Elu(x / alpha, alpha=1)`` (just ``Elu(x)`` for the default alpha = 1).

Tanh, Softplus, HardSigmoid, Elu, Mul and Div have importers in every release from 5.1 on; the
rules start at 7.0 like graphfix's other targets (and 5.1/6.0 document opsets <= 10 anyway).

Considered and left out (the parser data shows them missing in some release >= 7.0):

* Shrink (< 8.4): PyTorch never writes it: the legacy exporter lowers hardshrink/softshrink to
  Where/Greater/Less, the dynamo exporter decomposes them (into Abs/Sign/Where).
* Swish (opset 24, < 11.0): PyTorch writes SiLU as ``Mul(x, Sigmoid(x))`` (torchlib ``aten_silu``).
* Hardmax (< 9.2): no PyTorch op exports to it.
* IsInf/IsNaN, Sign/Round: in isinf-isnan-decompose and round-sign-decompose. Mod, Xor, Trilu,
  OneHot, GreaterOrEqual/LessOrEqual (7.0-7.2), CastLike (< 9.1): elementwise/indexing ops of
  issue 12's passes. BitShift: no release imports it and PyTorch only writes it for uint8,
  which TensorRT cannot compute with; no rewrite into supported types is exact.
* Softplus, Softsign, HardSigmoid, ThresholdedRelu, Selu, Elu, LogSoftmax, ReduceLogSumExp:
  imported by every release >= 7.0, nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor
from graphfix.passes._elementwise import float_dtype, onnx_domain
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule

HARDSWISH_ALPHA = 1.0 / 6.0


def _mish(b: Builder, x: gs.Tensor, node: gs.Node, dtype: np.dtype) -> gs.Tensor:
    return b.op("Mul", [x, b.op("Tanh", [b.op("Softplus", [x])])])


def _hardswish(b: Builder, x: gs.Tensor, node: gs.Node, dtype: np.dtype) -> gs.Tensor:
    return b.op("Mul", [x, b.op("HardSigmoid", [x], {"alpha": HARDSWISH_ALPHA, "beta": 0.5})])


def _celu(b: Builder, x: gs.Tensor, node: gs.Node, dtype: np.dtype) -> gs.Tensor:
    alpha = float(node.attrs.get("alpha", 1.0))
    if alpha == 1.0:
        return b.op("Elu", [x], {"alpha": 1.0})
    a = b.const(np.array(alpha, dtype), hint="alpha")
    return b.op("Mul", [a, b.op("Elu", [b.op("Div", [x, a])], {"alpha": 1.0})])


DECOMPOSE: dict[str, Callable[[Builder, gs.Tensor, gs.Node, np.dtype], gs.Tensor]] = {
    "Mish": _mish, "HardSwish": _hardswish, "Celu": _celu,
}


def rewrite(node: gs.Node, ctx: Context) -> None:
    dtype = float_dtype(node.inputs[0], node.op)
    y = DECOMPOSE[node.op](ctx.builder, node.inputs[0], node, dtype)
    replace_tensor(ctx.graph, node.outputs[0], y)


PASS = Pass(
    name="activation-decompose",
    summary="Rewrite Mish, HardSwish and Celu into Tanh/Softplus, HardSigmoid and Elu (their function bodies).",
    ops=frozenset(DECOMPOSE),
    rules=(
        Rule(NO_IMPORTER, ">=7.0,<10.0-EA", "no Mish importer before TensorRT 10.0", onnx_domain, ops=frozenset({"Mish"}),
             error="decomposable-op-missing", evidence="operator table (Mish first listed in 10.0-EA)"),
        Rule(NO_IMPORTER, ">=7.0,<8.4", "no HardSwish importer before TensorRT 8.4", onnx_domain, ops=frozenset({"HardSwish"}),
             error="decomposable-op-missing", evidence="importer source (HardSwish from 8.4.1; the 8.4 table says N)"),
        Rule(NO_IMPORTER, ">=7.0,<7.2-ngc21.05", "no Celu importer in TensorRT 7.0-7.2", onnx_domain, ops=frozenset({"Celu"}),
             error="decomposable-op-missing", evidence="operator table (Celu first listed in the 7.2.1 NGC 21.05 branch)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
