"""The opt-in rewrites that change results (graphfix.passes.OPT_IN) as whole-model steps, each
verified against the model it started from and judged against a documented bound.

Why a step and not a pass of the pipeline: the pipeline's verification accepts a rewritten
region only within float rounding (compare.DEFAULT_TOLERANCE, a few ulps, the model's noise
floor end to end), and a region that differs is undone. A re-quantization differs by design
(about one quantization step per tensor), so it would be undone, and widening the regions'
tolerance for it would widen it for every exact rewrite beside it. Here the exact passes keep
their verification untouched, and the inexact rewrite gets its own comparison, reported per
output in the units that make it readable (compare.deviation):

- ``--dequantize-dynamic`` runs before the passes (the float MatMul/Conv/LSTM it writes then meet
  the release's passes); it removes the quantization, so its outputs differ by the activations'
  run-time rounding: accepted within :data:`MAX_OF_PEAK` of each output's peak magnitude.
- ``--requantize-symmetric`` runs after the passes (it reads the Q/DQ that qoperator-to-qdq and
  qdq-uint8-to-int8 write) on the fixed model: accepted within :data:`MAX_STEPS` steps of each
  quantized output's new scale (an output read from a DequantizeLinear), :data:`MAX_OF_PEAK`
  of its peak for a float output with no scale.

Beyond the bound the step is rolled back (the model goes on without it) with a one-line reason;
within it the record is kept and its reason says it is not exact and by how much.
"""

from __future__ import annotations

import time

import numpy as np
import onnx
from onnx import numpy_helper

from graphfix import passes as registry
from graphfix.onnxio.validate import passes_full_check
from graphfix.pipeline.checks import _invalid
from graphfix.pipeline.settings import Settings, StrictFailure
from graphfix.report.model import KEPT, ROLLED_BACK, UNCHANGED, UNVERIFIED, PassRecord, Report
from graphfix.verify import compare as compare_mod
from graphfix.verify import sessions as sessions_mod

#: --requantize-symmetric: the most a quantized output may move, in steps of its new scale. Each
#: re-quantized tensor rounds to a step up to about twice its old one (half a new step), and the
#: rounding of the tensors before it arrives through the layers: a three-layer MLP of
#: onnxruntime's asymmetric UINT8 moved by up to 2.8 steps on random inputs, a small CNN by 1.
MAX_STEPS = 8.0
#: The most a float output (no scale to count steps in) may move, as a fraction of its peak
#: magnitude over the verification inputs: 8-bit rounding is 1/255 of a range (0.4 %); dynamic
#: quantization's fixtures moved by 0.2 % (CNN), 0.5 % (MLP), 0.9 % (LSTM).
MAX_OF_PEAK = 0.02

NOT_QUANTIZED = ("dequantize-dynamic: the written model is no longer quantized (float MatMul/Conv/LSTM on the dequantized "
                 "weights); TensorRT builds it in float, or in INT8 again only with static quantization "
                 "(calibration, or Q/DQ from a quantizer)")


def output_scales(model: onnx.ModelProto) -> dict[str, float]:
    """Per graph output read straight from a DequantizeLinear whose scale is a constant: that scale
    (the smallest, for a per-channel one: deviations then count in the finest step)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    constants = {t.name: t for t in model.graph.initializer}
    constants.update({n.output[0]: a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute
                      if a.name == "value" and a.type == onnx.AttributeProto.TENSOR})
    scales = {}
    for out in model.graph.output:
        node = producers.get(out.name)
        if node is not None and node.op_type == "DequantizeLinear" and node.input[1] in constants:
            value = numpy_helper.to_array(constants[node.input[1]])
            if value.size and np.all(value > 0):
                scales[out.name] = float(value.min())
    return scales


def dequantize_dynamic(model: onnx.ModelProto, settings: Settings, report: Report, counter: sessions_mod.SessionCounter,
                       feeds) -> onnx.ModelProto:
    """``--dequantize-dynamic`` (before the passes): ``feeds`` a callable giving the verification inputs."""
    return _step(registry.opt_in("dequantize-dynamic"), model, settings, report, counter, feeds)


def requantize_symmetric(model: onnx.ModelProto, settings: Settings, report: Report, counter: sessions_mod.SessionCounter,
                         feeds) -> onnx.ModelProto:
    """``--requantize-symmetric`` (after the passes, on the fixed model). QOperator nodes with
    asymmetric zero points, which qoperator-to-qdq leaves (their Q/DQ form would be refused too),
    are lowered first (its ``--force`` predicate; zero point 128 then made INT8 by
    qdq-uint8-to-int8, exactly): the step compares the model it started from with the whole."""
    return _step(registry.opt_in("requantize-symmetric"), model, settings, report, counter, feeds, _lowered_qoperators)


def _lowered_qoperators(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """``model`` with every QOperator node lowered to Q/DQ (and UINT8 zero point 128 made INT8 0),
    and how many nodes that rewrote."""
    lowered = registry.get("qoperator-to-qdq").apply(model, force=True)
    if not lowered.rewritten:
        return model, 0
    shifted = registry.get("qdq-uint8-to-int8").apply(lowered.model)
    return shifted.model, lowered.rewritten + shifted.rewritten


def _step(p: registry.Pass, model: onnx.ModelProto, settings: Settings, report: Report, counter: sessions_mod.SessionCounter,
          feeds, prepare=None) -> onnx.ModelProto:
    """``prepare``: exact rewrites the step needs first (model -> (model, nodes rewritten)), compared with it."""
    t0 = time.perf_counter()
    prepared, before = prepare(model) if prepare is not None else (model, 0)
    result = p.apply(prepared)  # every node it matches, whatever the target: the user asked for this rewrite
    record = PassRecord(p.name, UNCHANGED, matched=result.matched + before, rewritten=result.rewritten + before,
                        nodes_before=len(model.graph.node), nodes_after=len(model.graph.node),
                        findings=[f.as_dict() for f in result.findings])
    report.passes.append(record)
    candidate = result.model
    if before:
        report.notes.append(f"{p.name}: first {before} exact rewrite(s) (QOperator nodes with asymmetric zero points lowered "
                            "to Q/DQ by qoperator-to-qdq, zero point 128 made INT8 by qdq-uint8-to-int8), compared with the "
                            "step as a whole")
    if not result.rewritten and not before:
        record.seconds = round(time.perf_counter() - t0, 4)
        return model
    record.nodes_after = len(candidate.graph.node)
    record.verdict = UNVERIFIED
    broken = _invalid(candidate, True, model, report) if passes_full_check(model) else None
    if broken:
        record.verdict, record.reason = ROLLED_BACK, f"rolled back: the {p.name} model is invalid ({broken})"
    elif not settings.verify:
        record.reason = "not exact, and not verified (--no-verify): how far its outputs moved was not measured"
    else:
        _judge(p.name, model, candidate, record, settings, counter, feeds())
        if report.verification.startswith("none needed"):  # the passes rewrote nothing; this step was compared
            report.verification = f"{p.name}'s own comparison (graphfix.pipeline.inexact); no pass rewrote anything"
    record.seconds = round(time.perf_counter() - t0, 4)
    if record.verdict == ROLLED_BACK:
        if settings.strict:
            raise StrictFailure(f"--strict: {p.name} {record.reason}")
        record.nodes_after = record.nodes_before
        return model
    if p.name == "dequantize-dynamic":
        report.notes.append(NOT_QUANTIZED)
    return candidate


def _judge(name: str, model: onnx.ModelProto, candidate: onnx.ModelProto, record: PassRecord, settings: Settings,
           counter: sessions_mod.SessionCounter, feeds) -> None:
    """Both models on the verification inputs; the record's outputs, verdict and reason."""
    try:
        original, results = sessions_mod.run_pair(model, candidate, feeds, name, counter, settings.base_dir)
    except sessions_mod.CannotRun as exc:
        record.verdict, record.reason = ROLLED_BACK, f"rolled back: onnxruntime cannot run the {name} model ({exc})"
        return
    diffs = compare_mod.deviation(original, results, output_scales(candidate), MAX_STEPS, MAX_OF_PEAK)
    record.outputs = {k: d.as_dict() for k, d in diffs.items()}
    worst = max(diffs, key=lambda k: _measure(diffs[k]))
    d = diffs[worst]
    bad = [k for k, x in diffs.items() if not x.passed]
    if bad:
        x = diffs[bad[0]]
        record.verdict = ROLLED_BACK
        record.reason = f"rolled back: output {bad[0]} moved by {describe(x)}, beyond the bound ({x.bound}{'; ' + x.note if x.note else ''})"
    else:
        record.verdict = KEPT
        record.reason = f"not exact (opt-in): outputs moved by up to {describe(d)} ({worst}; bound {d.bound})"


def _measure(d: compare_mod.OutputDiff) -> float:
    """How far an output moved relative to its bound (the worst output is named in the reason)."""
    if d.steps is not None:
        return d.steps / MAX_STEPS
    return (d.of_peak if d.of_peak is not None else float("inf")) / MAX_OF_PEAK


def describe(d: compare_mod.OutputDiff) -> str:
    if d.steps is not None:
        return f"{d.steps:.2f} quantization step(s) (max abs {d.max_abs:.3g})"
    if d.of_peak is not None:
        return f"{100 * d.of_peak:.2f} % of its peak magnitude (max abs {d.max_abs:.3g}, max rel {d.max_rel:.3g})"
    return f"max abs {d.max_abs:.3g}"
