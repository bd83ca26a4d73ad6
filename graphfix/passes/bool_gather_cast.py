"""bool-gather-cast: Gather/GatherElements/GatherND and Where on BOOL data go through INT32.

Why: TensorRT parsers 7.2-8.4 reject BOOL data for the Gather family ("does not support BOOL
input type for the Gather operator"), and 8.0-8.3 reject BOOL x/y in Where (the doc lists BOOL,
the importer asserts otherwise). Transformer exports (BERT, GPT-2, DETR, T5 attention masks)
gather BOOL masks all the time.

Rewrite: Cast the BOOL operands to INT32, run the same op, Cast the result back to BOOL. Both
Casts are exact (0/1), so outputs are bit-identical.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.passes.base import TYPE, Context, Pass, Rule

#: op -> indices of the inputs that carry the BOOL data
BOOL_DATA_INPUTS = {"Gather": (0,), "GatherElements": (0,), "GatherND": (0,), "Where": (1, 2)}


def _bool_data(node: gs.Node, ctx: Context) -> bool:
    return all(k < len(node.inputs) and tensor_dtype(node.inputs[k]) == np.bool_ for k in BOOL_DATA_INPUTS[node.op])


def rewrite(node: gs.Node, ctx: Context) -> None:
    b = ctx.builder
    inputs = list(node.inputs)
    for k in BOOL_DATA_INPUTS[node.op]:
        inputs[k] = b.cast(inputs[k], np.int32)
    out = b.op(node.op, inputs, dict(node.attrs), dtype=np.int32)
    replace_tensor(ctx.graph, node.outputs[0], b.cast(out, np.bool_))


PASS = Pass(
    name="bool-gather-cast",
    summary="Route BOOL Gather/GatherElements/GatherND/Where data through INT32 Casts (bit-identical).",
    ops=frozenset(BOOL_DATA_INPUTS),
    rules=(
        Rule(TYPE, "<8.5", "BOOL data into Gather/GatherElements/GatherND", _bool_data,
             ops=frozenset({"Gather", "GatherElements", "GatherND"}), error="type-restricted-ops",
             evidence="importer source (gather family asserts non-BOOL before 8.5)"),
        Rule(TYPE, ">=8.0,<8.4", "BOOL x/y into Where", _bool_data, ops=frozenset({"Where"}),
             error="type-restricted-ops", evidence="importer source 8.0-8.2 (operator table lists BOOL)", certain=False),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
