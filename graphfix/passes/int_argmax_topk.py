"""int-argmax-topk: ArgMax/ArgMin/TopK on INT32/INT64 data computed in FLOAT, when that is exact.

Why: every parser before 8.6 rejects integer data for the TopK layer ArgMax/ArgMin/TopK import
as, and INT64 tensors are INT32 inside TensorRT: "This version of TensorRT does not support INT32
ArgMin/ArgMax input data." (argMinMaxHelper, 8.0-8.4), "This version of TensorRT does not support
INT32 input for the TopK operator." (importTopK 8.2-8.4), "Found invalid input type of INT32"
(notInvalidType, 8.5); a bare kINT32 assert in 5.1-7.2. 8.6 casts INT32 to FLOAT itself (with a
"rounding errors may occur" warning). Exports produce it for CLIP's text pooling
(``input_ids.argmax(-1)`` or ``(input_ids == eos).int().argmax(-1)``), detectors selecting
queries by integer votes, and reduce-axes-input's TopK for an integer ReduceMax over long axes.

Rewrite: ``Cast(x, FLOAT)``, the same op with the same attributes, and for TopK the values cast
back to the input type; the indices are the op's own. Exact when every value has
``|v| <= 2^24``: FLOAT then holds each value exactly, so the order and every equality are kept,
and with them ArgMax's ``select_last_index`` and TopK's lower-index-first tie order.

The bound is proven from the graph in one memoised walk (linear): constants; Cast of BOOL (and
comparisons); narrow integer types; ArgMax/TopK indices and Shape values over static dims; Range
between bounded ends; values that also index a Gather along a static axis (token ids into an
embedding table of V rows lie in [-V, V-1], or onnxruntime and the spec reject the model); and the
value-preserving and arithmetic ops between those (Reshape, Slice, Gather data, Concat, Where,
Max/Min, Add/Sub/Mul, ReduceSum over static dims, ...). Without a proof the node stays, with a
finding that says what to do.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._int_bounds import Bounds
from graphfix.passes.base import TYPE, Context, Pass, Rule

OPS = frozenset({"ArgMax", "ArgMin", "TopK"})
#: Largest magnitude FLOAT holds every integer up to.
EXACT = 1 << 24
_INTS = (np.dtype(np.int32), np.dtype(np.int64))


def _int_data(node: gs.Node, ctx: Context) -> bool:
    return bool(node.inputs) and tensor_dtype(node.inputs[0]) in _INTS


def _bounds(ctx: Context) -> Bounds:
    return ctx.memo("int_bounds", Bounds)


def rewrite(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    dtype = tensor_dtype(x)
    bound = _bounds(ctx).bound(x)
    if bound is None or bound > EXACT:
        shown = "unknown" if bound is None else f"up to {bound}"
        raise Skip(f"{node.op} on {str(dtype).upper()} data: its values ({shown}) are not provably within +-2^24, so a "
                   "FLOAT cast may merge distinct values and change the result; cast to float in the export where "
                   "the values are known to be small (ids, counts), compare in float upstream, or target TensorRT "
                   ">= 8.6 (which casts INT32 to FLOAT itself, with the same limit)")
    b = ctx.builder
    xf = b.cast(x, np.float32)
    if node.op == "TopK":
        values, indices = b.op("TopK", [xf, *node.inputs[1:]], dict(node.attrs), outputs=2)
        values.dtype, indices.dtype = np.dtype(np.float32), np.dtype(np.int64)
        replace_tensor(ctx.graph, node.outputs[0], b.cast(values, dtype))
        replace_tensor(ctx.graph, node.outputs[1], indices)
    else:
        replace_tensor(ctx.graph, node.outputs[0], b.op(node.op, [xf], dict(node.attrs), dtype=np.int64))


PASS = Pass(
    name="int-argmax-topk",
    summary="Compute ArgMax/ArgMin/TopK on INT32/INT64 data in FLOAT when the values are provably exact (|v| <= 2^24).",
    ops=OPS,
    rules=(
        Rule(TYPE, "<8.6", "ArgMax/ArgMin/TopK on INT32/INT64 data (INT64 is cast down to INT32): the TopK layer takes "
             "no INT32 input before 8.6", _int_data,
             evidence="importer source: argMinMaxHelper 'This version of TensorRT does not support INT32 ArgMin/ArgMax "
             "input data.' (onnx2trt_utils.cpp 8.0-GA-8.4-GA; kINT32 assert 5.1-7.2.1), importTopK 'does not support "
             "INT32 input for the TopK operator.' (builtin_op_importers.cpp 8.2-GA/8.4-GA), notInvalidType INT32 "
             "(8.5-GA); 8.6-GA casts INT32 to FLOAT"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
