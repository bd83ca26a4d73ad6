"""xor-decompose: Xor(a, b) as And(Or(a, b), Not(And(a, b))).

Why: TensorRT parsers before 8.4-EA have no Xor importer ("No importer registered for op:
Xor"; the importer appears in the 8.4-EA source). The legacy torch.onnx exporter emits Xor for
every integer floor division and Python ``%`` on integer tensors (``_floor_divide``: the
quotient is negative iff ``Xor(a < 0, b < 0)``), so ``idx // W`` in detection heads and position
encodings hits it, as does ``mask1 ^ mask2`` on BOOL masks.

Rewrite: ``And(Or(a, b), Not(And(a, b)))``, bit-exact, broadcasting like Xor. ``Not(Equal(a,
b))`` would be one node shorter, but TensorRT's Equal is an elementwise comparison on numbers
and not documented for BOOL operands, while And/Or/Not are the BOOL ops every release >= 7.0
imports (5.1/6.0 lack And/Or/Not too, hence the rule's lower bound). When the Xor sits on a
shape path (``x.size(2) // 2`` with dynamic axes), 8.0-8.2 cannot evaluate the unary Not on shape
tensors, but the exporter's own ``_floor_divide`` already puts a Not on that path, so the rewrite
adds no new failure there.
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule


def rewrite(node: gs.Node, ctx: Context) -> None:
    b = ctx.builder
    a, c = node.inputs[0], node.inputs[1]
    either = b.op("Or", [a, c])
    both = b.op("And", [a, c])
    replace_tensor(ctx.graph, node.outputs[0], b.op("And", [either, b.op("Not", [both])]))


PASS = Pass(
    name="xor-decompose",
    summary="Rewrite Xor into And/Or/Not (bit-exact).",
    ops=frozenset({"Xor"}),
    rules=(
        Rule(NO_IMPORTER, ">=7.0,<8.4-EA", "no Xor importer", error="unsupported-op-plugin-fallback-generic",
             evidence="operator table; importer source (first in 8.4-EA)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
