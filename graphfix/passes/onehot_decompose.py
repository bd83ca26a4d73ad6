"""onehot-decompose: OneHot as Equal(indices, arange(depth)) and Where(on, off).

Why: TensorRT parsers before 8.5 have no OneHot importer ("No importer registered for op:
OneHot"), and 8.5/8.5.3 reject a depth that is not a build-time constant ("OneHot does not
support dynamic depth input"; gone in 8.6). ``F.one_hot`` exports to OneHot (class targets,
label smoothing, token-type embeddings), and so does ``repeat_interleave`` with a traced count
(SAM/MobileSAM mask decoders with a dynamic point count).

A OneHot whose output feeds a shape input (SAM/MobileSAM ``repeat_interleave`` counts into Tile
repeats) is rewritten on every release: IOneHotLayer cannot compute a shape tensor; the
decomposition's Equal/Where/Range can, and a OneHot whose inputs fold becomes its value.

Rewrite: indices are cast to INT64 (the spec casts non-integer indices), negative ones get
``+ depth`` (``[-depth, depth - 1]`` is the valid range), and are compared with ``arange(depth)``
laid along ``axis``: a constant when depth folds, else ``Range(0, depth)``, a shape tensor every
release >= 7.0 computes. Out-of-range indices match nothing and give ``off`` everywhere, as the
spec says. ``Where(match, on, off)`` with ``on``/``off`` sliced from ``values`` at the output rank
(TensorRT 7.x Where needs equal ranks). Bit-exact for every values type.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.origin import reaches_shape_input
from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._axis import checked_axis
from graphfix.passes.base import LIMIT, NO_IMPORTER, Context, Pass, Rule


def _runtime_depth(node: gs.Node, ctx: Context) -> bool:
    return ctx.folder.value(node.inputs[1]) is None


def _computes_shape(node: gs.Node, ctx: Context) -> bool:
    return reaches_shape_input(node.outputs[0])


def rewrite(node: gs.Node, ctx: Context) -> None:
    folded = ctx.folder.value(node.outputs[0])
    if folded is not None:  # SAM's repeat_interleave counts: a constant once its inputs are
        replace_tensor(ctx.graph, node.outputs[0], ctx.builder.const(folded, hint="onehot"))
        return
    indices, depth_in, values = node.inputs[:3]
    if indices.shape is None or tensor_dtype(indices) is None:
        raise Skip("indices rank or type is unknown (run shape inference upstream)")
    rank = len(indices.shape) + 1
    axis = checked_axis(node, rank, -1)  # of the output, one rank above the indices
    b = ctx.builder
    idx = indices if tensor_dtype(indices) == np.int64 else b.cast(indices, np.int64)
    depth_value = ctx.folder.value(depth_in)
    if depth_value is not None:
        n = int(np.asarray(depth_value).reshape(-1)[0])  # the spec casts depth to int64 (truncation)
        depth: gs.Tensor = b.const(np.array(n, np.int64), hint="depth")
        arange: gs.Tensor = b.const(np.arange(n, dtype=np.int64).reshape([n] + [1] * (rank - 1 - axis)), hint="arange")
    else:
        depth = b.reshape(depth_in, np.array([], np.int64))
        if tensor_dtype(depth_in) != np.int64:
            depth = b.cast(depth, np.int64)
        arange = b.op("Range", [np.array(0, np.int64), depth, np.array(1, np.int64)], dtype=np.int64)
        if rank - 1 - axis:
            arange = b.unsqueeze(arange, list(range(1, rank - axis)))
    zero = np.zeros((), np.int64)
    wrapped = b.op("Where", [b.op("Less", [idx, zero]), b.op("Add", [idx, depth]), idx])
    match = b.op("Equal", [b.unsqueeze(wrapped, [axis]), arange])
    known = ctx.folder.value(values)
    if known is not None:
        off, on = (b.const(np.asarray(known).reshape(-1)[k].reshape((1,) * rank), hint=name) for k, name in ((0, "off"), (1, "on")))
    else:
        off, on = (b.reshape(b.slice(values, [k], [k + 1], axes=[0]), np.ones(rank, np.int64)) for k in (0, 1))
    replace_tensor(ctx.graph, node.outputs[0], b.op("Where", [match, on, off]))


PASS = Pass(
    name="onehot-decompose",
    summary="Rewrite OneHot (F.one_hot) into Equal with an arange and Where (bit-exact).",
    ops=frozenset({"OneHot"}),
    rules=(
        Rule(NO_IMPORTER, ">=7.0,<8.5", "no OneHot importer", error="decomposable-op-missing",
             evidence="operator table; importer source (first in 8.5.1)"),
        Rule(LIMIT, ">=8.5,<8.6", "OneHot depth is not a build-time constant (8.5 rejects a dynamic depth)", _runtime_depth,
             error="decomposable-op-missing", evidence="importer source 8.5 GA and 8.5.3"),
        Rule(LIMIT, ">=8.5", "OneHot output computes a shape tensor (Tile repeats, Reshape target): IOneHotLayer cannot",
             _computes_shape, error="layer-cannot-compute-shape-tensor",
             evidence="importer source 8.5-GA/8.6-GA builtin_op_importers.cpp (OneHot -> addOneHot); TensorRT developer guide's "
                      "shape-tensor layers do not include IOneHotLayer"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
