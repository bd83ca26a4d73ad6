"""bool-gather-cast: Gather/GatherElements/GatherND and Where on BOOL data go through INT32.

Why: TensorRT parsers 7.2-8.4 reject BOOL data for the Gather family ("does not support BOOL
input type for the Gather operator"), and 8.0-8.2 reject BOOL x/y in Where (the doc lists BOOL,
the importer asserts otherwise). Transformer exports (BERT, GPT-2, DETR, T5 attention masks)
gather BOOL masks all the time.

Rewrite: Cast the BOOL operands to INT32, run the same op, Cast the result back to BOOL. Both
Casts are exact (0/1), so outputs are bit-identical.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.passes.base import Context, Pass
from graphfix.trt.versions import VersionRange

#: op -> (indices of the inputs that carry the BOOL data, TensorRT releases that reject it)
BOOL_DATA_INPUTS = {
    "Gather": ((0,), VersionRange("<8.5")),
    "GatherElements": ((0,), VersionRange("<8.5")),
    "GatherND": ((0,), VersionRange("<8.5")),
    "Where": ((1, 2), VersionRange(">=8.0,<8.4")),
}


def _is_bool(t: gs.Tensor) -> bool:
    return tensor_dtype(t) == np.bool_


def match(node: gs.Node, ctx: Context) -> bool:
    spec = BOOL_DATA_INPUTS.get(node.op)
    if spec is None or (ctx.trt is not None and ctx.trt not in spec[1]):
        return False
    return all(k < len(node.inputs) and _is_bool(node.inputs[k]) for k in spec[0])


def rewrite(node: gs.Node, ctx: Context) -> None:
    b = ctx.builder
    inputs = list(node.inputs)
    for k in BOOL_DATA_INPUTS[node.op][0]:
        inputs[k] = b.cast(inputs[k], np.int32)
    out = b.op(node.op, inputs, dict(node.attrs), dtype=np.int32)
    replace_tensor(ctx.graph, node.outputs[0], b.cast(out, np.bool_))


PASS = Pass(
    problem='BOOL data into Gather/GatherElements/GatherND (rejected 7.2-8.4) or BOOL x/y into Where (8.0-8.2)',
    name="bool-gather-cast",
    order=25,
    summary="Route BOOL Gather/GatherElements/GatherND/Where data through INT32 Casts (bit-identical).",
    fixes=("type-restricted-ops",),
    needed_by="<8.5",
    match=match,
    rewrite=rewrite,
    doc=__doc__ or "",
    ops=frozenset(BOOL_DATA_INPUTS),
)
