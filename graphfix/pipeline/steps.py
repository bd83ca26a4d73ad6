"""Whole-model steps before the passes (--set-input, --fix-shapes, --convert-opset, --simplify), each
verified and rolled back when it breaks a check the input passed.
"""

from __future__ import annotations

import time

import onnx

from graphfix.check.findings import check_model
from graphfix.errors import GraphfixError
from graphfix.onnxio.validate import passes_full_check
from graphfix.pipeline import convert_opset as convert_mod
from graphfix.pipeline import fix_shapes
from graphfix.pipeline import set_inputs as set_inputs_mod
from graphfix.pipeline import simplify as simplify_mod
from graphfix.pipeline.checks import _invalid
from graphfix.pipeline.feeds import _LazyFeeds
from graphfix.pipeline.settings import Settings
from graphfix.pipeline.verification import end_to_end, users_diffs
from graphfix.report.model import ERROR, KEPT, ROLLED_BACK, UNCHANGED, UNVERIFIED, PassRecord, Report
from graphfix.trt.support import versions
from graphfix.verify import compare as compare_mod
from graphfix.verify import inputs as inputs_mod
from graphfix.verify import sessions as sessions_mod
from graphfix.verify import shapes as shapes_mod


def _freeze(model: onnx.ModelProto, settings: Settings, report: Report, counter: sessions_mod.SessionCounter) -> onnx.ModelProto:
    """--fix-shapes as a verified step before the passes: the frozen model against the original
    at the frozen shapes (two sessions); kept only when they agree, else the original goes on."""

    t0 = time.perf_counter()
    frozen, gone = fix_shapes.freeze(model, settings.fix_shapes)
    feeds = settings.feeds or (inputs_mod.make_inputs(model, settings.fix_shapes, settings.val_range, settings.seed,
                                                  settings.iterations) if settings.verify else [])
    try:
        return _whole_model_step("fix-shapes", model, frozen, gone or len(settings.fix_shapes), feeds, settings, report, counter, t0)
    except sessions_mod.CannotRun as exc:
        raise GraphfixError(f"--fix-shapes: onnxruntime cannot run the model at {shapes_mod.describe(settings.fix_shapes)} "
                            f"({exc})") from exc


def _specialise(model: onnx.ModelProto, settings: Settings, report: Report, counter: sessions_mod.SessionCounter,
                source: str | None, step) -> onnx.ModelProto:
    """--set-input as a verified step before the others: the specialised model against the
    original with those inputs made initializers of their values (the original fed them; two
    sessions, two more under the users' settings). Rolled back, the inputs stay frozen and
    unfolded: the model is still the one asked for, only not simplified."""
    t0 = time.perf_counter()
    frozen = settings.set_inputs
    reference, specialised, gone = set_inputs_mod.specialise(model, frozen)
    report.notes.append(f"specialised with --set-input {set_inputs_mod.describe(frozen)}: the written model no longer "
                        f"takes {', '.join(frozen)} as input{'s' if len(frozen) > 1 else ''} (its metadata "
                        f"{set_inputs_mod.METADATA_KEY} says so)")
    feeds = _LazyFeeds(reference, settings, report, source, counter, step).get() if settings.verify else []
    try:
        return _whole_model_step("set-input", reference, specialised, max(gone, 1), feeds, settings, report, counter, t0)
    except sessions_mod.CannotRun as exc:
        raise GraphfixError(f"--set-input: onnxruntime cannot run the model with {set_inputs_mod.describe(frozen)} ({exc})",
                            source) from exc


def _convert_opset(model: onnx.ModelProto, settings: Settings, report: Report, counter: sessions_mod.SessionCounter,
                   feeds: _LazyFeeds) -> onnx.ModelProto:
    """--convert-opset N (onnx.version_converter) as a verified step: kept only when the converted
    model gives the original's outputs; a model the converter cannot convert goes on as it was."""
    t0 = time.perf_counter()
    target = settings.convert_opset
    try:
        converted = convert_mod.convert(model, target)
    except convert_mod.ConvertFailed as exc:
        report.passes.append(PassRecord("convert-opset", ERROR, reason=f"not applied: onnx.version_converter to opset "
                                        f"{target} failed ({exc})"))
        return model
    if converted is model:
        report.passes.append(PassRecord("convert-opset", UNCHANGED, nodes_before=len(model.graph.node),
                                        nodes_after=len(model.graph.node), seconds=round(time.perf_counter() - t0, 4)))
        return model
    try:
        return _whole_model_step("convert-opset", model, converted, len(converted.graph.node),
                                 feeds.get() if settings.verify else [], settings, report, counter, t0)
    except sessions_mod.CannotRun as exc:  # the converter wrote what onnxruntime does not run: the input goes on
        record = report.passes[-1]  # the step's record, added by _whole_model_step before it ran anything
        record.verdict, record.nodes_after = ROLLED_BACK, record.nodes_before
        record.reason = f"rolled back: onnxruntime cannot run the converted model ({exc})"
        return model


def _simplify(model: onnx.ModelProto, settings: Settings, report: Report, counter: sessions_mod.SessionCounter,
              feeds: _LazyFeeds, before, source: str | None = None) -> onnx.ModelProto:
    """--simplify (onnxsim) as a verified step; also rolled back when it writes an op the target
    (or, without one, the newest release) rejects. The feeds are chosen only when onnxsim changed
    the graph: a simplification that changes nothing costs no session. A model onnxruntime cannot
    run is refused as without --simplify (exit 2), not a bug."""

    t0 = time.perf_counter()
    try:
        simplified = simplify_mod.simplify(model)
    except simplify_mod.SimplifyFailed as exc:
        report.passes.append(PassRecord("simplify", ERROR, reason=f"not applied: onnxsim failed ({exc})"))
        return model

    if _same_graph(model, simplified):
        report.passes.append(PassRecord("simplify", UNCHANGED, nodes_before=len(model.graph.node),
                                        nodes_after=len(model.graph.node), seconds=round(time.perf_counter() - t0, 4)))
        return model
    target = settings.trt or versions()[-1]
    added = simplify_mod.new_blockers(before if settings.trt else check_model(model, target), check_model(simplified, target))
    gone = len(model.graph.node) - len(simplified.graph.node)
    if added:
        report.passes.append(PassRecord("simplify", ROLLED_BACK, rewritten=max(gone, 1), nodes_before=len(model.graph.node),
                                        nodes_after=len(model.graph.node), reason=f"rolled back: it writes what TensorRT "
                                        f"{target} rejects: {'; '.join(added[:3])}"))
        return model
    try:
        return _whole_model_step("simplify", model, simplified, max(gone, 1), feeds.get() if settings.verify else [],
                                 settings, report, counter, t0)
    except sessions_mod.CannotRun as exc:
        raise GraphfixError(f"--simplify: onnxruntime cannot run the input model, so the simplified one cannot be verified "
                            f"({exc}); fix the inputs (--input-shapes/--val-range/--load-inputs) or use --no-verify",
                            source) from exc


def _same_graph(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    """Whether two models hold the same graph (their nodes and weights, compared as bytes)."""
    return len(a.graph.node) == len(b.graph.node) and \
        a.graph.SerializeToString(deterministic=True) == b.graph.SerializeToString(deterministic=True)


def _whole_model_step(name: str, model: onnx.ModelProto, candidate: onnx.ModelProto, rewritten: int, feeds, settings: Settings,
                      report: Report, counter: sessions_mod.SessionCounter, t0: float) -> onnx.ModelProto:
    """A step that rewrites the whole model, verified end to end against the model it started
    from on ``feeds`` (two sessions, and two more under the users' settings: _users_settings);
    the candidate is returned only when they agree under both."""
    record = PassRecord(name, UNVERIFIED, matched=1, rewritten=rewritten, nodes_before=len(model.graph.node),
                        nodes_after=len(candidate.graph.node))
    report.passes.append(record)
    broken = _invalid(candidate, True, model, report) if passes_full_check(model) else None
    if broken:  # every later step checks what it writes: it would blame itself for this step's defect
        record.verdict, record.reason = ROLLED_BACK, f"rolled back: the {name} model is invalid ({broken})"
        record.nodes_after = record.nodes_before
    elif settings.verify:
        original, results = sessions_mod.run_pair(model, candidate, feeds, name, counter, settings.base_dir)
        diffs = end_to_end(model, original, results, settings, feeds, counter, report)
        record.outputs = {k: d.as_dict() for k, d in diffs.items()}
        bad = [k for k, d in diffs.items() if not d.passed]
        if not bad and counter.tuned and sessions_mod.on_onnxruntime(model):
            try:
                reference = compare_mod.first_iterations(sessions_mod.switched_run(model, feeds, counter, settings.base_dir), len(feeds))
            except GraphfixError:
                raise
            except Exception:  # noqa: BLE001 - the input itself does not run there: nothing to compare with
                reference = None
            users = users_diffs(model, reference, candidate, settings, report, feeds, counter)[0] if reference else {}
            bad = [f"{k} only under {sessions_mod.USERS_SETTINGS}" for k, d in users.items() if not d.passed]
        record.verdict = ROLLED_BACK if bad else KEPT
        if bad:
            record.reason = f"rolled back: the {name} model's outputs differ ({', '.join(bad)})"
            record.nodes_after = record.nodes_before
    record.seconds = round(time.perf_counter() - t0, 4)
    return model if record.verdict == ROLLED_BACK else candidate
