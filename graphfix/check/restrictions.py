"""Parser rules no graphfix pass rewrites: `graphfix check` reports them and names what to change.

Each :class:`Restriction` is one thing a TensorRT release's ONNX parser refuses (a blocking
finding) or computes differently from ONNX (``wrong-results``: a warning), with the releases it
holds for, read in the onnx-tensorrt importer source of those releases (branch and file in
``evidence``), and the change to the export that clears it (``upstream``, printed as the fix).
Releases after 10.1 keep a rule read at 10.1-GA where their docs/operators.md says the same (no
importer source of those releases was read).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.conditional import branch_pairs, runtime_condition
from graphfix.check.loops import LOOP_RESTRICTIONS
from graphfix.check.parser_rule import Restriction
from graphfix.graph import is_weights, optional_input, tensor_dtype
from graphfix.passes.base import LIMIT, TYPE, WRONG_RESULTS, Context

QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
#: Zero-point types whose values the importers check (shiftIsAllZeros reads them as bytes).
_INTEGER_ZERO_POINTS = frozenset({"int8", "uint8", "int16", "uint16", "int4", "uint4"})


# ----------------------------------------------------------------- QuantizeLinear / DequantizeLinear
def _known(t: gs.Tensor | None, ctx: Context) -> np.ndarray | None:
    """The value of an initializer or Constant output (what the importer sees as weights)."""
    if t is None or not is_weights(t, empty=False):
        return None
    value = ctx.folder.value(t)
    return None if value is None else np.asarray(value)


def _dtype(t: gs.Tensor | None) -> str | None:
    dtype = tensor_dtype(t) if t is not None else None
    return None if dtype is None else str(dtype)


def _nonzero_zero_point(node: gs.Node, ctx: Context) -> str | None:
    zero_point = optional_input(node, 2)
    if _dtype(zero_point) not in _INTEGER_ZERO_POINTS:
        return None  # FP8 zero points are not checked (and not read)
    value = _known(zero_point, ctx)
    if value is None or not value.any():
        return None
    shown = ", ".join(str(v) for v in value.reshape(-1)[:4]) + (", …" if value.size > 4 else "")
    return (f"zero point '{zero_point.name}' is not all zeros ({shown}): TensorRT only supports symmetric "
            f"quantization")


def _uint8(node: gs.Node, ctx: Context) -> str | None:
    """DequantizeLinear reads UINT8 data (weights, a graph input, a Cast: what TensorRT types as
    UINT8, not a QuantizeLinear's output, which it types INT8 and which the Q's own finding
    covers), or QuantizeLinear writes UINT8 (its zero point's type)."""
    x = node.inputs[0] if node.inputs else None
    if node.op == "DequantizeLinear" and _dtype(x) == "uint8" and not (x.inputs and x.inputs[0].op == "QuantizeLinear"):
        return f"input '{x.name}' is UINT8: TensorRT quantizes to INT8 only"
    zero_point = optional_input(node, 2)
    if node.op == "QuantizeLinear" and _dtype(zero_point) == "uint8":
        return f"zero point '{zero_point.name}' is UINT8: TensorRT quantizes to INT8 only"
    return None


def _uint8_as_int8(node: gs.Node, ctx: Context) -> str | None:
    found = _uint8(node, ctx)
    return None if found is None else f"{found}; this release accepts it and computes INT8: values above 127 saturate"


def _uint8_without_zero_point(node: gs.Node, ctx: Context) -> str | None:
    """QuantizeLinear with no zero point writes UINT8 in ONNX (unless ``output_dtype`` says
    otherwise); 9.0+ quantize to INT8 instead."""
    if node.op != "QuantizeLinear" or optional_input(node, 2) is not None:
        return None
    if node.attrs.get("output_dtype", 0) not in (0, 2):  # 2: TensorProto.UINT8
        return None
    return ("no zero point: ONNX quantizes to UINT8 [0, 255], TensorRT to INT8 [-128, 127] (values above 127 "
            "saturate, negative values are kept)")


def _no_zero_point(node: gs.Node, ctx: Context) -> str | None:
    if optional_input(node, 2) is not None:
        return None
    return "no zero point input: this release requires all 3 inputs"


def _fp8(node: gs.Node, ctx: Context) -> str | None:
    """A Q/DQ whose zero point (or, for DequantizeLinear, data) is FLOAT8E4M3FN."""
    for t in (optional_input(node, 2), node.inputs[0] if node.op == "DequantizeLinear" and node.inputs else None):
        if t is not None and t.dtype is not None and "float8" in str(t.dtype).lower():
            return f"'{t.name}' is FLOAT8E4M3FN: this release's parser has no FP8 type"
    return None


def _non_positive_scale(node: gs.Node, ctx: Context) -> str | None:
    value = _known(optional_input(node, 1), ctx)
    if value is None or value.size == 0 or not np.issubdtype(value.dtype, np.floating) or bool((value > 0).all()):
        return None
    return f"scale '{node.inputs[1].name}' has values <= 0 (min {float(value.min()):g}): scales must all be positive"


_QDQ_SOURCE = "onnx-tensorrt QuantDequantLinearHelper"
_SYMMETRIC = (f"{_QDQ_SOURCE}: ASSERT(shiftIsAllZeros(zeroPoint)) 'TRT only supports symmetric quantization' on a "
              "weights zero point, builtin_op_importers.cpp 8.0-GA..8.6-GA, 9.1, 9.3 (9.0-GA and 9.2: DequantizeLinear only, "
              "QuantizeLinear's zero point is not read there), onnxOpImporters.cpp 10.0-GA, 10.1-GA, main@7ecb49a; "
              "docs/operators.md 8.0-GA..10.1-GA and the 10.6+ tables: 'zero_point must be 0'")
#: Releases whose importer checks both ops' zero points, and those that check (and read) only
#: DequantizeLinear's: 9.0-GA and 9.2 test ``chosenDataType == kINT8 && isDQ``, 9.1 and 9.3 do not.
_BOTH_CHECKED, _DQ_ONLY_CHECKED = ">=8.0,<9.0 || >=9.1,<9.2 || >=9.3", ">=9.0,<9.1 || >=9.2,<9.3"
_REQUANTIZE = ("re-quantize symmetrically with INT8 zero points of 0 (onnxruntime.quantization.quantize_static(..., "
               "quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, "
               "extra_options={'ActivationSymmetric': True, 'WeightSymmetric': True}), or NVIDIA ModelOpt / "
               "pytorch-quantization, which write TensorRT's Q/DQ form)")


# --------------------------------------------------------------------------------------------- If
def _rank_mismatch(node: gs.Node, ctx: Context) -> str | None:
    pairs = branch_pairs(node)
    if pairs is None or not runtime_condition(node, ctx.folder):
        return None
    differ = [f"output {k}: then '{a.name}' rank {len(a.shape)}, else '{b.name}' rank {len(b.shape)}"
              for k, (a, b) in enumerate(pairs) if a.shape is not None and b.shape is not None and len(a.shape) != len(b.shape)]
    return f"then/else outputs differ in rank ({'; '.join(differ)}) and the condition is computed at runtime" if differ else None


def _dims_mismatch(node: gs.Node, ctx: Context) -> str | None:
    pairs = branch_pairs(node)
    if pairs is None or not runtime_condition(node, ctx.folder):
        return None
    differ = [f"output {k}: then '{a.name}' {list(a.shape)}, else '{b.name}' {list(b.shape)}"
              for k, (a, b) in enumerate(pairs)
              if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape)
              and any(isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(a.shape, b.shape, strict=True))]
    return f"then/else outputs differ in static dims ({'; '.join(differ)}) and the condition is computed at runtime" \
        if differ else None


def _dims_may_differ(node: gs.Node, ctx: Context) -> str | None:
    """Same rank, no static dims that differ, but a static dim against a symbolic one (optimum's
    merged decoder: the with-past branch returns a [0, H, 1, D] placeholder where the other returns
    [batch, H, encoder_length, D]): one shape only for inputs that make the symbol that size."""
    pairs = branch_pairs(node)
    if pairs is None or not runtime_condition(node, ctx.folder):
        return None
    differ = []
    for k, (a, b) in enumerate(pairs):
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            continue
        dims = list(zip(a.shape, b.shape, strict=True))
        if any(isinstance(x, int) and isinstance(y, int) and x != y for x, y in dims):
            continue  # if-branch-dims
        if any(isinstance(x, int) != isinstance(y, int) and isinstance(x, int | str) and isinstance(y, int | str) for x, y in dims):
            differ.append(f"output {k}: then '{a.name}' {list(a.shape)}, else '{b.name}' {list(b.shape)}")
    return (f"then/else outputs agree in shape only for inputs that give a symbolic dim the other branch's static size "
            f"({'; '.join(differ)}) and the condition is computed at runtime") if differ else None


_DECIDE_IF = ("decide the If before TensorRT: graphfix --set-input NAME=VALUE for a condition a flag or a sample rate gives, "
              "--fix-shapes NAME:dims for one a dynamic length gives (then if-inline folds it)")
_SPLIT_DECODERS = "merged decoders: export the with-past and without-past decoders as separate models"
_IF_FIX = (f"{_DECIDE_IF}; or make both branches return the same shape (Reshape/Unsqueeze the shorter branch's output "
           f"inside it), or decide the branch at export time; {_SPLIT_DECODERS}")
_IF_RUNTIME_FIX = ("decide the If before TensorRT (graphfix --set-input NAME=VALUE for a flag such as use_cache_branch), "
                   "or return one shape from both branches (a placeholder of the other branch's dims); "
                   f"{_SPLIT_DECODERS}")
_IF_RANK_FIX = (f"{_DECIDE_IF}; or re-export with a fixed rank (the branch decided at export time), or make both branches "
                f"return the same rank (Reshape/Unsqueeze the shorter branch's output inside it); {_SPLIT_DECODERS}. "
                "(graphfix's if-rank-unify applies only where one branch returns a Squeeze/Unsqueeze/Reshape/Flatten of "
                "the other's tensor and every reader ignores the rank: a constant Reshape, a Size, a Flatten splitting both "
                "alike; not so here)")


RESTRICTIONS: tuple[Restriction, ...] = (
    Restriction("qdq-uint8", QDQ, TYPE, ">=8.5", _uint8,
                f"{_QDQ_SOURCE}: CHECK(notInvalidType(inputs.at(0), {{\"UINT8\"}})) and, for QuantizeLinear, "
                "notInvalidType(inputs.at(2), {\"UINT8\"}): 'Found invalid input type of UINT8' (8.x-9.x) / 'Found unsupported input type of UINT8' (10.x), builtin_op_importers.cpp "
                "8.5-GA, 8.6-GA, 9.0-GA, 9.3; onnxOpImporters.cpp 10.0-GA, 10.1-GA, main@7ecb49a (the 9.0+ warning 'TensorRT "
                "will use INT8 instead' of a UINT8 zero point comes after these checks); docs/operators.md lists "
                "DequantizeLinear for INT8 (8.x) / INT8, FP8, INT4 (9.0+) only",
                f"quantize to INT8: {_REQUANTIZE}", error="qdq-uint8", types=True),
    Restriction("qdq-uint8-as-int8", QDQ, WRONG_RESULTS, ">=8.0,<8.5", _uint8_as_int8,
                "builtin_op_importers.cpp 8.0-GA..8.4-GA: no type check; UINT8 weights are widened to INT32 "
                "(onnx2trt_utils.cpp convertUINT8) and the layer quantizes to INT8",
                f"quantize to INT8: {_REQUANTIZE}", types=True),
    Restriction("qdq-zero-point", QDQ, LIMIT, _BOTH_CHECKED, _nonzero_zero_point, _SYMMETRIC,
                f"use symmetric quantization: {_REQUANTIZE}", error="qdq-asymmetric-zero-point"),
    Restriction("qdq-zero-point-dq", frozenset({"DequantizeLinear"}), LIMIT, _DQ_ONLY_CHECKED, _nonzero_zero_point,
                _SYMMETRIC, f"use symmetric quantization: {_REQUANTIZE}", error="qdq-asymmetric-zero-point"),
    Restriction("q-zero-point-ignored", frozenset({"QuantizeLinear"}), WRONG_RESULTS, _DQ_ONLY_CHECKED, _nonzero_zero_point,
                f"{_QDQ_SOURCE}, builtin_op_importers.cpp 9.0-GA, 9.2: the zero point is checked and read only "
                "'if (chosenDataType == DataType::kINT8 && isDQ)': a QuantizeLinear's is dropped (quantized as if 0)",
                f"use symmetric quantization: {_REQUANTIZE}"),
    Restriction("qdq-three-inputs", QDQ, LIMIT, ">=8.0,<8.6", _no_zero_point,
                f"{_QDQ_SOURCE}: ASSERT(inputs.size() == 3) 'This version of TensorRT requires 3 inputs for the "
                "DequantizeLinear operator', builtin_op_importers.cpp 8.0-GA..8.5-GA (8.6-GA asks for at least 2)",
                "add an INT8 zero point of 0 as the third input (same shape as the scale)"),
    Restriction("q-default-uint8", frozenset({"QuantizeLinear"}), WRONG_RESULTS, ">=9.0", _uint8_without_zero_point,
                f"{_QDQ_SOURCE}: 'ONNX default is UINT8, TRT will default to INT8' (chosenDataType = kINT8 when there is "
                "no zero point), builtin_op_importers.cpp 9.0-GA, 9.3; onnxOpImporters.cpp 10.0-GA, 10.1-GA",
                "add an INT8 zero point of 0 as the third input (or output_dtype=INT8 at opset 21+)"),
    Restriction("qdq-fp8", QDQ, TYPE, "<9.0", _fp8,
                "onnx2trt_utils.cpp convertDtype, 8.6-GA: no FLOAT8E4M3FN case ('Unsupported ONNX data type'); "
                "FP8 first in 9.0-GA (onnx2trt_utils.cpp convertDtype -> kFP8, builtin_op_importers.cpp "
                "QuantDequantLinearHelper chooses kFP8 from the zero point's type, 9.3), TensorOrWeights.cpp 10.0-GA",
                "quantize to INT8 for this release (NVIDIA ModelOpt quantize(quantize_mode='int8')), or build with TensorRT "
                ">= 9.0 (10.x) for FP8", types=True),
    Restriction("qdq-scale-positive", QDQ, LIMIT, ">=8.0", _non_positive_scale,
                f"{_QDQ_SOURCE}: ASSERT(scaleAllPositive) 'Scale coefficients must all be positive' on a weights scale, "
                "builtin_op_importers.cpp 8.0-GA..9.3, onnxOpImporters.cpp 10.0-GA, 10.1-GA, main@7ecb49a",
                "give every scale a positive value (a channel whose weights are all zero still needs a scale > 0, e.g. 1)",
                error="qdq-scale-not-positive"),
    Restriction("if-branch-rank", frozenset({"If"}), LIMIT, ">=8.0", _rank_mismatch,
                "importIf with a tensor condition: 8.0-GA builtin_op_importers.cpp selects between both branches after "
                "isBroadcastValid ('Cannot broadcast shapes that have different ranks!', onnx2trt_utils.cpp); 8.2-GA..10.1-GA "
                "build an IIfConditional (ConditionalHelpers.cpp addIfOutputLayers) and TensorRT refuses its output layer: "
                "'IIfConditionalOutputLayer inputs must have the same shape' (NVIDIA/TensorRT#1731, #2846, #4603); "
                "docs/operators.md: 'broadcastable shapes' (8.0-GA..10.0-GA), 'the same rank' (10.1-GA)",
                _IF_RANK_FIX, error="if-branch-shape-mismatch"),
    Restriction("if-branch-dims", frozenset({"If"}), LIMIT, ">=8.2", _dims_mismatch,
                "IIfConditional (8.2-GA..10.1-GA importIf, ConditionalHelpers.cpp): 'IIfConditionalOutputLayer inputs must "
                "have the same shape. Shapes are [2] and [1].' (NVIDIA/TensorRT#4603, TensorRT 10; DEIMv2#108, 8.6.1); "
                "docs/operators.md says 'broadcastable' (8.x-10.0) / 'same rank' (10.1-GA): the builder wants equal dims",
                _IF_FIX, error="if-branch-shape-mismatch"),
    Restriction("if-branch-dims-runtime", frozenset({"If"}), LIMIT, ">=8.2", _dims_may_differ,
                "IIfConditional (importIf, 8.2-GA..8.6-GA ConditionalHelpers.cpp addIfOutputLayers, 10.1-GA "
                "onnxOpImporters.cpp: conditional->addOutput(thenOut, elseOut), no shape check of the importer's own); "
                "TensorRT's IIfConditionalOutputLayer wants both inputs of one shape ('IIfConditionalOutputLayer inputs "
                "must have the same shape', NVIDIA/TensorRT#4603): a static dim against a dynamic one agrees only for "
                "the inputs that make them equal (uncertain: no engine was built here)",
                _IF_RUNTIME_FIX, error="if-branch-shape-mismatch", certain=False),
    *LOOP_RESTRICTIONS,
)


def broken(node: gs.Node, ctx: Context) -> Iterator[tuple[Restriction, str]]:
    """The restrictions that hold for ``ctx.trt`` and that ``node`` breaks, with the message."""
    for r in RESTRICTIONS:
        if node.op in r.ops and (ctx.trt is None or ctx.trt in r.range):
            message = r.detect(node, ctx)
            if message is not None:
                yield r, message
