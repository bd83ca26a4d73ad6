"""fold-weights: inputs a TensorRT release reads as weights, folded into initializers.

Why: TensorRT's ONNX importer reads some inputs as *weights*: an initializer or the output of a
Constant node. Anything else fails the import, even when the graph computes it from constants
only. Exports compute such values all the time: ``weight_norm``/weight standardisation/Gaussian
kernels (``F.conv2d`` with a computed kernel), autocast's ``Cast`` of fp32 weights to fp16,
``Constant -> Cast`` literals, ``ConstantOfShape(Shape(x)[1])`` ones for InstanceNormalization,
TopK K / Split sizes / Resize scales from ``x.shape``, Cast axes. The parser FAQ's fix is graph
constant folding (polygraphy ``--fold-constants``, onnx-simplifier); this pass folds exactly the
inputs the target release needs as weights and leaves the rest of the graph as exported.

Releases (onnx-tensorrt importer source 5.1 ... 10.1-GA, operator tables, changelogs):

==========================  ==================================  ==============================
input                       releases that need weights          how known
==========================  ==================================  ==============================
InstanceNorm scale, B       < 10.0                              plugin path (default < 10.0)
Conv/ConvTranspose W        < 8.5                               operator table, importer
Conv/ConvTranspose B        < 8.5                               importer asserts (7.0-8.4)
BatchNorm scale/B/mean/var  < 7.0                               importer (7.0+ falls back)
TopK K (opset >= 10)        6.0 - 8.5                           importer, topk-k-not-initializer
Squeeze/Unsqueeze axes (13) 7.2-ngc21.05 - 10.6                 importer; 10.7 changelog
Resize/Upsample scales      < 8.4 (when ``sizes`` is absent)    importer, 8.4 accepts tensors
Slice axes (opset >= 10)    6.0 - 10.2                          importer; 10.3 changelog
Slice starts/ends/steps     6.0                                 importer 6.0 (7.0: shape tensors)
ReduceSum axes (13)         >= 8.0                              importer (reduceTensor)
ReduceX axes (18)           >= 10.0                             importer (9.x ignores the input)
Split split (13)            7.2-ngc21.05 - 8.0                  importer (8.2: tensors)
NMS max_output/iou/score    8.0 - 8.4                           importer (8.5: tensors)
Q/DQ scale, zero_point      7.0 - 7.2                           importer (8.0: tensors)
Dropout training_mode (12)  >= 8.0                              importer, 10.1 operator table
==========================  ==================================  ==============================

Owned by other passes, so not claimed here: Clip min/max (fold-clip), Pad pads/value/axes
(pad-to-concat), CumSum axis (cumsum-decompose), Range bounds (range-inputs). Left out: the If
condition of 7.1/7.2 (inlining the branch is the better fix), W/R/B of the RNNv2-based recurrent
importers before 8.6, OneHot depth (a shape tensor TensorRT folds itself), and 9.x ReduceX-18
importers that *ignore* the axes input (a wrong-results problem no folding fixes).

Conv/ConvTranspose weights produced by DequantizeLinear are left alone: that is the explicit
quantization pattern TensorRT's multi-input convolution path reads (folding it would turn an
INT8 layer into a float one).

Rewrite: each computed input becomes an initializer holding its value in the input's dtype (one
per computed tensor, shared by its consumers; the chain that computed it is dropped when nothing
else reads it). Values come from the ONNX reference implementation (``graphfix.graph.Folder``)
with a limit of ``WEIGHTS_MAX_ELEMENTS`` elements per value: a weight must exist as one tensor
anyway, so the limit only guards memory. An input that depends on runtime values (input data,
dynamic dims, random ops) is reported with the path from that source to the input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from graphfix.analysis.fold import Folder
from graphfix.graph import is_weights, optional_input, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._provenance import runtime_path
from graphfix.passes.base import MUST_BE_WEIGHTS, Context, Pass, Rule

#: Largest folded value (elements): a 4096 x 4096 or 512 x 512 x 7 x 7 weight still folds.
WEIGHTS_MAX_ELEMENTS = 1 << 24
REDUCE_OPS = frozenset({
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceSumSquare",
})

Indices = Callable[[gs.Node, int], tuple[int, ...]]


@dataclass(frozen=True)
class Family:
    """Inputs of some ops that a range of releases reads as weights: (node, opset) -> input indices."""

    ops: frozenset[str]
    inputs: Indices
    #: Computed inputs the releases accept after all (Conv weights through DequantizeLinear).
    exempt: Callable[[gs.Tensor], bool] | None = None

    def computed(self, node: gs.Node, ctx: Context) -> list[int]:
        """The indices of this family's inputs that are present and not weights."""
        return [k for k in self.inputs(node, ctx.opset) if k < len(node.inputs) and not is_weights(node.inputs[k])
                and not (self.exempt is not None and self.exempt(node.inputs[k]))]

    def when(self, node: gs.Node, ctx: Context) -> bool:
        return bool(self.computed(node, ctx))


def _fixed(*idx: int) -> Indices:
    return lambda node, opset: idx


def _since(opset_min: int, *idx: int) -> Indices:
    return lambda node, opset: idx if opset >= opset_min else ()


def _scales(node: gs.Node, opset: int) -> tuple[int, ...]:
    """Upsample-9 input 1; Resize-10 input 1; Resize-11+ input 2 unless ``sizes`` is given."""
    if node.op == "Upsample":
        return (1,) if opset >= 9 else ()
    if opset < 11:
        return (1,)
    return () if optional_input(node, 3) is not None else (2,)


def _dequantized(t: gs.Tensor) -> bool:
    """Explicitly quantized weights (QAT / ModelOpt exports): TensorRT's multi-input Conv path
    exists for them, and folding would drop the quantization TensorRT must see."""
    return bool(t.inputs) and t.inputs[0].op == "DequantizeLinear"


def _family(ops: str, inputs: Indices, exempt: Callable[[gs.Tensor], bool] | None = None) -> Family:
    return Family(frozenset(ops.split()), inputs, exempt)


INSTANCE_NORM = _family("InstanceNormalization", _fixed(1, 2))
CONV_W = _family("Conv ConvTranspose", _fixed(1), _dequantized)
CONV_B = _family("Conv ConvTranspose", _fixed(2), _dequantized)
BATCH_NORM = _family("BatchNormalization", _fixed(1, 2, 3, 4))
TOPK_K = _family("TopK", _since(10, 1))
SQUEEZE_AXES = _family("Squeeze Unsqueeze", _since(13, 1))
SCALES = _family("Resize Upsample", _scales)
SLICE_AXES = _family("Slice", _since(10, 3))
SLICE_BOUNDS = _family("Slice", _since(10, 1, 2, 4))
REDUCESUM_AXES = _family("ReduceSum", _since(13, 1))
REDUCE_AXES = Family(REDUCE_OPS, _since(18, 1))
SPLIT = _family("Split", _since(13, 1))
NMS = _family("NonMaxSuppression", _fixed(2, 3, 4))
QDQ = _family("QuantizeLinear DequantizeLinear", _fixed(1, 2))
DROPOUT = _family("Dropout", _since(12, 2))


def _rule(family: Family, versions: str, message: str, evidence: str, error: str | None = None) -> Rule:
    return Rule(MUST_BE_WEIGHTS, versions, message, family.when, ops=family.ops, error=error, evidence=evidence)


#: (family, rule) pairs: the rewrite folds the families whose rule holds for the target.
FAMILIES: tuple[tuple[Family, Rule], ...] = (
    (INSTANCE_NORM, _rule(INSTANCE_NORM, "<10.0", "InstanceNormalization scale/B must be initializers",
                          "importer source 5.1-9.3 (plugin path, the default until kNATIVE_INSTANCENORM in 10.0)")),
    (CONV_W, _rule(CONV_W, "<8.5", "Conv/ConvTranspose weight W must be an initializer",
                   "operator table (Conv 5.1-6.0 and 8.2-8.4, ConvTranspose 5.1-8.4); importer source")),
    (CONV_B, _rule(CONV_B, "<8.5", "Conv/ConvTranspose bias B must be an initializer",
                   "importer source 5.1-8.4 (8.5 routes a tensor bias to the multi-input path)")),
    (BATCH_NORM, _rule(BATCH_NORM, "<7.0", "BatchNormalization scale/B/mean/var must be initializers",
                       "importer source 5.1-6.0 (7.0 adds an elementwise fallback)")),
    (TOPK_K, _rule(TOPK_K, ">=6.0,<8.6", "TopK K must be an initializer", "importer source 6.0-8.5; operator table 8.2-8.5",
                   "topk-k-not-initializer")),
    (SQUEEZE_AXES, _rule(SQUEEZE_AXES, ">=7.2-ngc21.05,<10.7", "Squeeze/Unsqueeze axes input must be an initializer",
                         "importer source 7.2-ngc21.05-10.1; operator table; changelog 10.7 (dynamic axes)")),
    (SCALES, _rule(SCALES, "<8.4", "Resize/Upsample scales must be an initializer",
                   "importer source 5.1-8.2 (8.4 accepts tensor scales)", "resize-upsample-scales-not-constant")),
    (SLICE_AXES, _rule(SLICE_AXES, ">=6.0,<10.3", "Slice axes input must be an initializer",
                       "importer source 6.0-10.1; operator table 7.0-10.1; changelog 10.3", "slice-dynamic-axes")),
    (SLICE_BOUNDS, _rule(SLICE_BOUNDS, ">=6.0,<7.0", "Slice starts/ends/steps must be initializers",
                         "importer source 6.0 (7.0 reads them as shape tensors)")),
    (REDUCESUM_AXES, _rule(REDUCESUM_AXES, ">=8.0", "ReduceSum axes input must be an initializer",
                           "importer source 8.0-10.1 (reduceTensor); operator table 10.0+")),
    (REDUCE_AXES, _rule(REDUCE_AXES, ">=10.0", "opset-18 ReduceX axes input must be an initializer",
                        "importer source 10.0-10.1 (9.x ignores the input); operator table 10.0+")),
    (SPLIT, _rule(SPLIT, ">=7.2-ngc21.05,<8.2", "Split sizes input must be an initializer",
                  "importer source 7.2-ngc21.05 and 8.0 (8.2 accepts tensors)")),
    (NMS, _rule(NMS, ">=8.0,<8.5", "NonMaxSuppression max_output_boxes_per_class/iou_threshold/score_threshold must be initializers",
                "operator table and importer source 8.0-8.4")),
    (QDQ, _rule(QDQ, ">=7.0,<8.0", "QuantizeLinear/DequantizeLinear scale and zero point must be initializers",
                "operator table and importer source 7.0-7.2")),
    (DROPOUT, _rule(DROPOUT, ">=8.0", "Dropout training_mode must be an initializer",
                    "importer source 8.0-10.1; operator table 10.1+")),
)


def rewrite(node: gs.Node, ctx: Context) -> None:
    wanted = sorted({k for family, rule in FAMILIES if rule.holds(node, ctx) for k in family.computed(node, ctx)})
    folder = _folder(ctx)
    values = {k: folder.value(node.inputs[k]) for k in wanted}
    missing = [k for k, v in values.items() if v is None]
    if missing:
        raise Skip("; ".join(f"{_label(node, k, ctx.opset)} is not constant: {runtime_path(node.inputs[k], folder)}" for k in missing)
                   + " (TensorRT needs it as weights: make it a constant in the export)")
    for k, value in values.items():
        node.inputs[k] = _initializer(node.inputs[k], value, _label(node, k, ctx.opset), ctx)


def _folder(ctx: Context) -> Folder:
    """One memoised folder per graph and pass run, with the weights size limit."""
    folder = ctx.options.get("weights_folder")
    if folder is None:
        folder = ctx.options["weights_folder"] = Folder(ctx.graph, WEIGHTS_MAX_ELEMENTS)
    return folder


def _initializer(t: gs.Tensor, value: np.ndarray, label: str, ctx: Context) -> gs.Constant:
    """The folded value as an initializer of ``t``'s dtype; consumers of one tensor share it."""
    cache: dict[int, tuple[gs.Tensor, gs.Constant]] = ctx.options.setdefault("folded_weights", {})
    if id(t) in cache:
        return cache[id(t)][1]
    dtype = tensor_dtype(t)
    value = np.asarray(value)
    if dtype is not None and value.dtype != dtype:
        value = value.astype(dtype)
    const = ctx.builder.const(value, hint=label)
    cache[id(t)] = (t, const)  # keep t alive: ids must not be reused while the cache lives
    return const


def _label(node: gs.Node, k: int, opset: int) -> str:
    """The ONNX schema's name of input ``k`` (``W``, ``scales``, ``K``...)."""
    try:
        formal = onnx.defs.get_schema(node.op, opset, "").inputs
    except Exception:  # noqa: BLE001 - unknown op/opset: a positional name
        return f"input{k}"
    return formal[min(k, len(formal) - 1)].name if formal else f"input{k}"


PASS = Pass(
    name="fold-weights",
    summary="Fold computed inputs that TensorRT reads as weights (Conv W/B, norm params, TopK K, axes, scales) into initializers.",
    ops=frozenset().union(*(family.ops for family, _ in FAMILIES)),
    rules=tuple(rule for _, rule in FAMILIES),
    rewrite=rewrite,
    doc=__doc__ or "",
)
