"""gelu-decompose: Gelu (opset 20) as the Erf / Tanh formula the op is defined by.

Why: TensorRT parsers before 10.0 have no Gelu importer ("No importer registered for op: Gelu",
"could not find plugin: Gelu"); 10.0-EA is the first with one (operator table, PARSER_NOTES).
``torch.onnx.export(..., dynamo=True)`` at opset >= 20 writes ``nn.GELU`` / ``F.gelu`` as one
Gelu node (a BART/BERT/ViT MLP is ``MatMul -> Add -> Gelu -> MatMul``; GPT-2's ``gelu_new`` is
``approximate="tanh"``), so every transformer exported that way fails on 7.x-9.x.

Rewrite: the formulas that define the op (ONNX Gelu-20), computed in the input's float type (fp16
stays fp16, as the op's function body computes; no upcast):

* ``approximate="none"``: ``(0.5 * x) * (1 + Erf(x / sqrt(2)))``.
* ``approximate="tanh"``: ``(0.5 * x) * (1 + Tanh(sqrt(2/pi) * x * (1 + 0.044715 * x * x)))``, which
  is ``sqrt(2/pi) * (x + 0.044715 * x^3)`` with the cube as products: no Pow (so no question of a
  negative base in TensorRT's Pow), and the shape onnxruntime fuses into its FastGelu kernel.

``0.5 * x`` comes first: halving is exact, and ``x * (1 + erf)`` would overflow fp16 for
``|x| > 32752`` where the result itself is representable. inf/NaN come out as the op's: ``-inf``
gives NaN (``-inf * 0``), like onnxruntime's native Gelu.

Every op used (Div, Erf, Add, Mul, Tanh) has an importer in every release >= 7.0; 5.1/6.0 lack
Erf (and document opsets <= 10), so the rule starts at 7.0 like graphfix's other targets.

Speed (``bench/gelu_latency.py``, onnxruntime CPU, 1 thread, (8, 512, 768) fp32): where Gelu feeds
the next layer, as in every MLP, onnxruntime fuses both formulas back into one kernel (Gelu,
FastGelu): 0.9-1.1x the native op. Unfused (ORT_DISABLE_ALL, or the tanh form as a graph output,
which onnxruntime's FastGelu fusion skips) the elementwise chain costs ~3.7x (none) and 6-8x
(tanh). TensorRT >= 8 fuses adjacent pointwise layers into one (developer guide, "Pointwise
Fusion").

Left out: ``com.microsoft`` Gelu / FastGelu / BiasGelu (written by onnxruntime's transformer
optimizer, not by an exporter; custom-domain nodes that no release parses: export from the
unoptimised model); ``approximate`` values other than none/tanh (invalid ONNX: a finding).
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._elementwise import erf_gelu, float_dtype, onnx_domain, tanh_gelu
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    dtype = float_dtype(x, node.op)
    mode = node.attrs.get("approximate", "none")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "none":
        y = erf_gelu(ctx.builder, x, dtype)
    elif mode == "tanh":
        y = tanh_gelu(ctx.builder, x, dtype)
    else:
        raise Skip(f"approximate={mode!r} is not a Gelu mode (none, tanh)")
    replace_tensor(ctx.graph, node.outputs[0], y)


PASS = Pass(
    name="gelu-decompose",
    summary="Rewrite Gelu (opset 20, none/tanh) into its Erf / Tanh formula in the input's float type.",
    ops=frozenset({"Gelu"}),
    rules=(
        Rule(NO_IMPORTER, ">=7.0,<10.0-EA", "no Gelu importer before TensorRT 10.0", onnx_domain,
             error="gelu-not-supported", evidence="operator table (Gelu first listed in 10.0-EA)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
