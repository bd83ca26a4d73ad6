"""contrib-norm-lower: onnxruntime's fused normalizations as standard ONNX.

Why: onnxruntime's transformer optimizer (``optimize_model``, optimum's O1-O4) fuses BERT/ViT/GPT-2
embeddings and residual norms into ``com.microsoft`` ``EmbedLayerNormalization`` and
``SkipLayerNormalization``, and Llama-style RMS norms into ``SimplifiedLayerNormalization`` /
``SkipSimplifiedLayerNormalization``, which it registers in the *default* domain as well. No
TensorRT release has an importer for any of them: the parser looks importers up by op type
(``ModelImporter.cpp``), finds none and falls back to a plugin that does not exist ("No importer
registered for op: SkipLayerNormalization. Attempting to import as plugin." then "Plugin not
found"). A contrib ``LayerNormalization`` (the default domain below opset 17, which onnxruntime keeps
for old models) is imported by the ONNX importer from 8.6 on, with the
ONNX op's meaning, which is the same; before 8.6 there is none, and the onnx checker knows it
only from opset 17.

How (semantics from the schemas onnxruntime registers and its ContribOperators.md; statistics in
float32 as onnxruntime's kernels keep them, the result cast back to the input's type):

* ``SkipLayerNormalization(input, skip, gamma, beta?, bias?)``: ``s = input + skip (+ bias)``;
  ``output = LayerNorm(s) * gamma (+ beta)`` over the last axis; ``mean``, ``inv_std_var`` and
  ``input_skip_bias_sum`` (``s``) are built only when something reads them.
* ``SkipSimplifiedLayerNormalization(input, skip, gamma, bias?)``: the same sum, RMS-normalised:
  ``s / sqrt(mean(s * s) + epsilon) * gamma``.
* ``SimplifiedLayerNormalization(X, scale)``: RMS normalisation over ``[axis, rank)``.
* ``EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding,
  segment_embedding?, gamma, beta, mask?, position_ids?)``: ``Gather`` of each table, summed
  (positions ``0..S-1`` when ``position_ids`` is absent), layer-normalised; ``mask_index`` is the
  number of ones per row of ``mask`` as int32 (zeros without a mask), ``embedding_sum`` the sum.
* ``LayerNormalization`` below opset 17 (onnxruntime's contrib form, in the default domain): the
  standardised two-pass form.

The mean and variance use the normalisation helpers of layernorm-decompose (ReduceSum / count where
a parser before 10.0 would ignore an opset-18 ReduceMean's axes input).

Cost (``bench/contrib_latency.py``, onnxruntime CPU, 1 thread, lowered / native, three runs):
SkipLayerNormalization 1x128x768 0.19-0.26x (onnxruntime re-fuses the LayerNormalization),
SimplifiedLayerNormalization 1.8-3.0x, EmbedLayerNormalization (1x128, vocab 30522) 2.1-3.0x.

Left out (findings): bfloat16 or integer inputs, a non-negative ``axis`` on a tensor of unknown rank,
``stash_type`` other than 1, ``EmbedLayerNormalization`` with ``mask_index_type`` 0 whose mask index
is read (onnxruntime writes none then).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, is_read, optional_input, replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._contrib import (
    NO_CONTRIB_IMPORTER,
    float_type,
    microsoft,
    microsoft_or_default,
    replace_typed,
)
from graphfix.passes._norm import (
    element_count,
    first_axis,
    mean_over,
    reduce_mean_reads_axes,
    standardize,
    stash_dtype,
)
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule
from graphfix.trt.versions import TrtVersion

F32 = np.dtype(np.float32)
#: First release with a LayerNormalization importer (layernorm-decompose's rule).
LN_IMPORTER = TrtVersion("8.6")


def _to_f32(b: Builder, x: gs.Tensor, dtype: np.dtype) -> gs.Tensor:
    return x if dtype == F32 else b.cast(x, F32)


def _layer_norm(node: gs.Node, ctx: Context, s: gs.Tensor, dtype: np.dtype, first: int = -1):
    """LayerNorm of ``s`` over ``[first, 0)`` in float32: (normalised in ``dtype``, moments)."""
    b = ctx.builder
    m = standardize(b, _to_f32(b, s, dtype), list(range(first, 0)), element_count(s, first),
                    float(node.attrs.get("epsilon", 1e-5)), F32, reduce_mean_reads_axes(ctx))
    return (m.normalized if dtype == F32 else b.cast(m.normalized, dtype)), m


def _rms_norm(node: gs.Node, ctx: Context, s: gs.Tensor, dtype: np.dtype, first: int = -1):
    """``s / sqrt(mean(s * s) + epsilon)`` over ``[first, 0)`` in float32: (normalised in ``dtype``, rms)."""
    b = ctx.builder
    sc = _to_f32(b, s, dtype)
    mean = mean_over(b, sc, list(range(first, 0)), element_count(s, first), F32, reduce_mean_reads_axes(ctx))
    eps = np.array(float(node.attrs.get("epsilon", 1e-5)), F32)
    rms = b.op("Sqrt", [b.op("Add", [mean(b.op("Mul", [sc, sc], dtype=F32)), eps], dtype=F32)], dtype=F32)
    normalized = b.op("Div", [sc, rms], dtype=F32)
    return (normalized if dtype == F32 else b.cast(normalized, dtype)), rms


def _affine(b: Builder, y: gs.Tensor, scale: gs.Tensor | None, shift: gs.Tensor | None) -> gs.Tensor:
    if scale is not None:
        y = b.op("Mul", [y, scale])
    if shift is not None:
        y = b.op("Add", [y, shift])
    return y


def _replace_if_used(ctx: Context, node: gs.Node, k: int, make) -> None:
    if len(node.outputs) > k and is_read(node.outputs[k], ctx.graph):
        replace_tensor(ctx.graph, node.outputs[k], make())


def _skip_sum(node: gs.Node, ctx: Context, bias_at: int) -> gs.Tensor:
    b = ctx.builder
    s = b.op("Add", [node.inputs[0], node.inputs[1]])
    bias = optional_input(node, bias_at)
    return s if bias is None else b.op("Add", [s, bias])


def _reciprocal(b: Builder, t: gs.Tensor) -> gs.Tensor:
    return b.op("Div", [np.array(1, F32), t], dtype=F32)


def _skip_layer_norm(node: gs.Node, ctx: Context) -> None:
    dtype = float_type(node, 0, 1, 2, 3, 4)
    b = ctx.builder
    s = _skip_sum(node, ctx, 4)
    y, m = _layer_norm(node, ctx, s, dtype)
    replace_typed(ctx.graph, node.outputs[0], _affine(b, y, node.inputs[2], optional_input(node, 3)), dtype)
    _replace_if_used(ctx, node, 1, lambda: m.mean)
    _replace_if_used(ctx, node, 2, lambda: _reciprocal(b, m.std))
    _replace_if_used(ctx, node, 3, lambda: s)


def _skip_simplified(node: gs.Node, ctx: Context) -> None:
    dtype = float_type(node, 0, 1, 2, 3)
    b = ctx.builder
    s = _skip_sum(node, ctx, 3)
    y, rms = _rms_norm(node, ctx, s, dtype)
    replace_typed(ctx.graph, node.outputs[0], b.op("Mul", [y, node.inputs[2]]), dtype)
    if len(node.outputs) > 1 and is_read(node.outputs[1], ctx.graph):
        raise Skip("the mean output of SkipSimplifiedLayerNormalization is read (onnxruntime leaves it undefined)")
    _replace_if_used(ctx, node, 2, lambda: _reciprocal(b, rms))
    _replace_if_used(ctx, node, 3, lambda: s)


def _simplified(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    dtype = float_type(node, 0, 1)
    stash_dtype(node)
    y, rms = _rms_norm(node, ctx, x, dtype, first_axis(node, x))
    replace_typed(ctx.graph, node.outputs[0], ctx.builder.op("Mul", [y, node.inputs[1]]), dtype)
    _replace_if_used(ctx, node, 1, lambda: _reciprocal(ctx.builder, rms))


def _contrib_layer_norm(node: gs.Node, ctx: Context) -> None:
    x = node.inputs[0]
    dtype = float_type(node, 0, 1, 2)
    stash_dtype(node)
    b = ctx.builder
    y, m = _layer_norm(node, ctx, x, dtype, first_axis(node, x))
    replace_typed(ctx.graph, node.outputs[0], _affine(b, y, optional_input(node, 1), optional_input(node, 2)), dtype)
    _replace_if_used(ctx, node, 1, lambda: m.mean)
    _replace_if_used(ctx, node, 2, lambda: _reciprocal(b, m.std))


def _embed_layer_norm(node: gs.Node, ctx: Context) -> None:
    b = ctx.builder
    ids, word, pos_table = node.inputs[0], node.inputs[2], node.inputs[3]
    segment_ids, segment_table = optional_input(node, 1), optional_input(node, 4)
    gamma, beta = node.inputs[5], node.inputs[6]
    mask, position_ids = optional_input(node, 7), optional_input(node, 8)
    dtype = float_type(node, 2, 3, 5)
    s = b.op("Gather", [word, ids], {"axis": 0})
    if position_ids is None:
        length = b.slice(b.shape(ids), [1], [2], [0])
        position_ids = b.op("Range", [np.array(0, np.int64), b.squeeze(length, [0]), np.array(1, np.int64)])
        position_ids = b.unsqueeze(position_ids, [0])
    s = b.op("Add", [s, b.op("Gather", [pos_table, position_ids], {"axis": 0})])
    if segment_ids is not None and segment_table is not None:
        s = b.op("Add", [s, b.op("Gather", [segment_table, segment_ids], {"axis": 0})])
    y, _ = _layer_norm(node, ctx, s, dtype)
    replace_typed(ctx.graph, node.outputs[0], _affine(b, y, gamma, beta), dtype)
    if len(node.outputs) > 1 and is_read(node.outputs[1], ctx.graph):
        if int(node.attrs.get("mask_index_type", 1)) != 1:
            raise Skip("mask_index is read but mask_index_type is not 1")
        mask_index = node.outputs[1]
        replace_tensor(ctx.graph, mask_index, _mask_index(b, ids, mask))
        if mask_index.shape is None:  # [batch]: contrib-attention-lower reads its rank to tell the mask's form
            mask_index.shape = [ids.shape[0] if ids.shape else "batch"]
    _replace_if_used(ctx, node, 2, lambda: s)


def _mask_index(b: Builder, ids: gs.Tensor, mask: gs.Tensor | None) -> gs.Tensor:
    """Ones per row of ``mask`` as int32 (onnxruntime's CPU kernel counts them), zeros without a mask."""
    i32 = np.dtype(np.int32)
    if mask is None:  # a zero per row: ReduceSum of ids * 0 (no ConstantOfShape tensor attribute to export)
        return b.reduce("ReduceSum", b.op("Mul", [b.cast(ids, i32), np.array(0, np.int32)], dtype=i32), [1], keepdims=False, dtype=i32)
    ones = b.cast(b.op("Equal", [b.cast(mask, i32), np.array(1, np.int32)], dtype=np.bool_), i32)
    return b.reduce("ReduceSum", ones, [1], keepdims=False, dtype=i32)


_REWRITES = {
    "SkipLayerNormalization": _skip_layer_norm,
    "SkipSimplifiedLayerNormalization": _skip_simplified,
    "SimplifiedLayerNormalization": _simplified,
    "LayerNormalization": _contrib_layer_norm,
    "EmbedLayerNormalization": _embed_layer_norm,
}


def rewrite(node: gs.Node, ctx: Context) -> None:
    _REWRITES[node.op](node, ctx)


def _contrib_layer_norm_form(node: gs.Node, ctx: Context) -> bool:
    """onnxruntime's LayerNormalization: the default domain below opset 17 (onnxruntime registers
    it there since version 1 for models older than the ONNX op)."""
    return ctx.opset < 17 and (node.domain or "") in ("", "ai.onnx")


def _lists_statistics(node: gs.Node, ctx: Context) -> bool:
    return _contrib_layer_norm_form(node, ctx) and any(is_read(t, ctx.graph) for t in node.outputs[1:])


PASS = Pass(
    name="contrib-norm-lower",
    summary="Lower onnxruntime's fused norms (Skip/Embed/Simplified LayerNormalization, contrib LayerNormalization) to standard ONNX.",
    ops=frozenset(_REWRITES),
    rules=(
        Rule(NO_IMPORTER, "all", "onnxruntime contrib op: no TensorRT importer (plugin fallback fails)", microsoft,
             ops=frozenset({"SkipLayerNormalization", "EmbedLayerNormalization", "SkipSimplifiedLayerNormalization"}),
             error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
        Rule(NO_IMPORTER, "all", "onnxruntime contrib op (in the default domain): no TensorRT importer",
             microsoft_or_default, ops=frozenset({"SimplifiedLayerNormalization"}),
             error="unsupported-op-plugin-fallback-generic", evidence=NO_CONTRIB_IMPORTER),
        Rule(NO_IMPORTER, "<8.6", "onnxruntime's contrib LayerNormalization: no LayerNormalization importer before 8.6",
             _contrib_layer_norm_form, ops=frozenset({"LayerNormalization"}),
             error="layernormalization-not-supported", evidence="operator table; importer source 8.4-8.5 (ModelImporter.cpp "
             "imports by op_type, so the contrib form meets the ONNX importer from 8.6)"),
        Rule(NO_IMPORTER, ">=8.6", "onnxruntime's contrib LayerNormalization lists Mean/InvStdDev: only Y is imported",
             _lists_statistics, ops=frozenset({"LayerNormalization"}),
             evidence="importer source 8.6-GA/10.1-GA (layernorm-decompose's rule)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
    domains=frozenset({"", "ai.onnx", "com.microsoft"}),
)
