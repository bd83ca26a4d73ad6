"""groupnorm-decompose: GroupNormalization as Reshape [N, G, -1] + standardisation + Reshape back + affine.

Why: parsers before 8.6 have no GroupNormalization importer (diffusion UNets, wav2vec2's feature
encoder). From 8.6 the importer passes scale/bias to the normalization layer as ``[1, S, 1, 1]``,
which TensorRT accepts only per group (``[1, G, 1, 1]``): the opset-21 form, with per-channel
scale/bias ``[C]``, fails to parse until 10.9 ("opset-21 GroupNormalization" in the 10.9
changelog; NVIDIA/TensorRT#4313, #4336 on 10.7). And with ``num_groups=1`` the importer's
spatial-only axes mask makes the layer normalise each channel on its own, an instance norm:
wrong results (NVIDIA/TensorRT#4756 on 10.16, fix proposed in onnx/onnx-tensorrt#1052; the
importer has built the same mask since 8.6, so older releases are listed as uncertain).

How: ``Xg = Reshape(X, [0, G, -1])``, the exact two-pass standardisation of layernorm-decompose
over the last axis (``D = Xg - mean``, ``D / sqrt(mean(D * D) + epsilon)``; not the function
body's ``E[x**2] - E[x]**2``, which onnxruntime runs and which loses digits on offset data and
small groups), then the affine:

* opset 18 (scale/bias per *group*, shape ``[G]``): applied in the grouped view as ``[G, 1]``,
  before reshaping back, which is exactly "the same scale for every channel of a group" and
  needs neither C nor the rank at rewrite time.
* opset 21 (per *channel*, ``[C]``): ``Reshape(n, Shape(X))``, then scale/bias as
  ``[C, 1, ..., 1]``.

fp16 X is standardised in float32 and cast back before the affine: ``stash_type`` (opset 21,
only 1 is decomposed) says so; the opset-18 function body computes in X's type, float32 is the
more accurate reading and what TensorRT's normalization layer does. Axes and counts as in
layernorm-decompose (ReduceSum / count at opset >= 18 unless the target reads ReduceMean's axes
input, >= 10.0).

Cost (``bench/norm_latency.py``, (8, 320, 64, 64), 32 groups, fp32, onnxruntime CPU, 1 thread):
0.4x-0.75x the native op (onnxruntime has no fast GroupNormalization kernel and runs the
function body).

Considered: Reshape + InstanceNormalization(scale=1, bias=0), what torch.onnx and torchlib
emit. It is the fastest on onnxruntime (0.4x-0.5x), but TensorRT 8.x imports
InstanceNormalization as the InstanceNormalization_TRT plugin (plugin library needed,
initializer and rank 3-5 checks; errors.json "instancenormalization-plugin-missing"), so the
plain-op form was kept.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, static_shape
from graphfix.graph.build import Skip
from graphfix.passes._norm import (
    element_count,
    float_dtype,
    reduce_mean_reads_axes,
    standardize,
    stash_dtype,
)
from graphfix.passes.base import LIMIT, NO_IMPORTER, WRONG_RESULTS, Context, Pass, Rule

#: First opset whose GroupNormalization takes per-channel scale/bias.
PER_CHANNEL_OPSET = 21


def _channels(node: gs.Node) -> int | None:
    shape = node.inputs[0].shape
    c = shape[1] if shape is not None and len(shape) > 1 else None
    return int(c) if isinstance(c, (int, np.integer)) and c >= 0 else None


def _per_channel_affine(node: gs.Node, ctx: Context) -> bool:
    """Opset-21 form whose scale really is per channel (C != num_groups)."""
    if ctx.opset < PER_CHANNEL_OPSET:
        return False
    shape = static_shape(node.inputs[1])
    length = shape[0] if shape is not None and len(shape) == 1 else _channels(node)
    return length is None or length != int(node.attrs.get("num_groups", 0))


def _one_group(node: gs.Node, ctx: Context) -> bool:
    return int(node.attrs.get("num_groups", 0)) == 1 and _channels(node) != 1


def rewrite(node: gs.Node, ctx: Context) -> None:
    x, scale, bias = node.inputs[0], node.inputs[1], node.inputs[2]
    dtype = float_dtype(x)
    compute = stash_dtype(node)
    groups = int(node.attrs["num_groups"])
    per_channel = ctx.opset >= PER_CHANNEL_OPSET
    rank = len(x.shape) if x.shape is not None else None
    if per_channel and rank is None:
        raise Skip("input rank is unknown (run shape inference upstream)")
    b = ctx.builder
    xc = x if dtype == compute else b.cast(x, compute)
    grouped = b.reshape(xc, np.array([0, groups, -1], np.int64))
    m = standardize(b, grouped, [-1], _group_size(x, groups), float(node.attrs.get("epsilon", 1e-5)), compute,
                    reduce_mean_reads_axes(ctx))
    out = m.normalized if dtype == compute else b.cast(m.normalized, dtype)
    if per_channel:
        out = b.reshape(out, b.shape(x))
        out = b.op("Add", [b.op("Mul", [out, _column(b, scale, rank - 1, ctx)]), _column(b, bias, rank - 1, ctx)])
    else:
        out = b.op("Add", [b.op("Mul", [out, _column(b, scale, 2, ctx)]), _column(b, bias, 2, ctx)])
        out = b.reshape(out, b.shape(x))
    replace_tensor(ctx.graph, node.outputs[0], out)


def _group_size(x: gs.Tensor, groups: int) -> int | None:
    per_sample = element_count(x, 1)
    return None if per_sample is None else per_sample // groups


def _column(b: Builder, v: gs.Tensor, rank: int, ctx: Context) -> gs.Tensor:
    """A 1-D scale/bias as ``[len, 1, ..., 1]`` of the given rank (folded when it is constant)."""
    shape = [-1] + [1] * (rank - 1)
    known = ctx.folder.value(v)
    if known is not None:
        return b.const(np.asarray(known).reshape(shape), hint="affine")
    return b.reshape(v, np.array(shape, np.int64))


PASS = Pass(
    name="groupnorm-decompose",
    summary="Rewrite GroupNormalization (opset 18 per-group or opset 21 per-channel affine) into Reshape + ReduceMean/Pow/Sqrt/Div + Mul/Add.",
    ops=frozenset({"GroupNormalization"}),
    rules=(
        Rule(NO_IMPORTER, "<8.6", "no GroupNormalization importer", error="groupnormalization-not-supported",
             evidence="operator table; importer source 8.6"),
        Rule(LIMIT, ">=8.6,<10.9", "opset-21 per-channel scale/bias: the importer takes only per-group [1, G, 1, 1]",
             _per_channel_affine, evidence="changelog 10.9; NVIDIA/TensorRT#4313, #4336"),
        Rule(WRONG_RESULTS, ">=10.16", "num_groups=1 is computed as an instance norm (per channel)", _one_group,
             evidence="NVIDIA/TensorRT#4756; onnx/onnx-tensorrt#1052"),
        Rule(WRONG_RESULTS, ">=8.6,<10.16", "num_groups=1 is computed as an instance norm (per channel)", _one_group,
             evidence="importer source 8.6/10.1 (same spatial-only axes mask as 10.16, NVIDIA/TensorRT#4756)",
             certain=False),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
