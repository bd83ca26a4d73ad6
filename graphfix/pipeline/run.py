"""The ordered pass pipeline: one graph through every pass, then node-level verification.

The model is imported once (one shape inference, ``gc.freeze()`` so the collector does not
rescan the big import), every pass edits the same onnx-graphsurgeon graph, and the graph is
exported once at the end. Each pass's contract is checked as it runs (:func:`_ensure`): nothing
it matches is left unreported, the graph's inputs/outputs keep their names, dtypes and shapes.

Verification runs after the passes, and only when something was rewritten: a run whose passes
changed nothing opens no onnxruntime session (no shape search either). Otherwise it costs at
most four sessions whatever the number of passes (``graphfix.verify.regions``): the *probe* (the
original model plus a renamed copy of every rewritten region, wired to the original tensors)
computes, in one run, the original outputs and each region's original and rewritten values; a
region that differs is undone alone (node-level rollback, named in the report); one end-to-end
run of the fixed model confirms the whole; then the original and the fixed model run once more
under the settings users run (onnxruntime's defaults, graph optimizations on), where an
optimizer rule may read a rewrite otherwise. Should the final run disagree although every
region agreed, graphfix falls back to checking pass by pass (``verify_each``, one session per
changed pass), and says so. Shapes: several (see ``graphfix.verify.shapes``); the candidate-shape
search runs on its own session, reported apart.
"""

from __future__ import annotations

import gc
import time

import onnx

from graphfix import passes as registry
from graphfix.analysis import discrete
from graphfix.graph import to_graph
from graphfix.graph.convert import to_parts
from graphfix.graph.edits import EditLog
from graphfix.onnxio.proto import Assembled
from graphfix.passes.base import Pass
from graphfix.pipeline import fix_shapes, inexact
from graphfix.pipeline.checks import _check, check_fixed, trt_summary
from graphfix.pipeline.feeds import _LazyFeeds
from graphfix.pipeline.load_checks import LoadChecks
from graphfix.pipeline.manager import _auto, choose_passes, run_passes, trt_version
from graphfix.pipeline.settings import Outcome, Settings, without_frozen
from graphfix.pipeline.steps import _convert_opset, _freeze, _simplify, _specialise
from graphfix.pipeline.verification import _verify_each, verify_regions
from graphfix.report.model import Report
from graphfix.verify import inputs as inputs_mod
from graphfix.verify import sessions as sessions_mod


# ---------------------------------------------------------------------------- entry point
def run(model: onnx.ModelProto, settings: Settings, source: str | None = None, target: str | None = None,
        progress=None, checks: LoadChecks | None = None) -> Outcome:
    """``checks``: onnx.checker and shape inference of the model, running in the worker (a big
    graph, graphfix.pipeline.load_checks): the import takes the inferred types from it, and the
    checker's verdict, last."""
    start = time.perf_counter()
    trt_version(settings.trt)
    for name in settings.force:
        registry.get(name)
    _refuse_early(model, settings)
    report = Report(source, target, settings.public())
    counter = sessions_mod.SessionCounter()
    step = progress or (lambda what: None)
    if settings.set_inputs:
        step("freezing inputs")
        model = _specialise(model, settings, report, counter, source, step)
        settings = without_frozen(settings)
    if settings.fix_shapes:
        step("fixing input shapes")
        model = _freeze(model, settings, report, counter)
    if settings.trt is not None:
        step(f"checking the model for TensorRT {settings.trt}")
    before = _check(model, settings.trt)  # once: it chooses the passes for auto and opens the summary

    feeds = _LazyFeeds(model, settings, report, source, counter, step)  # chosen when something needs them
    if settings.convert_opset is not None:
        step(f"converting to opset {settings.convert_opset} (onnx.version_converter)")
        converted = _convert_opset(model, settings, report, counter, feeds)
        if converted is not model:
            model, before = converted, _check(converted, settings.trt)
    summary_before = before  # the TensorRT summary's "before": what --dequantize-dynamic started from
    if settings.dequantize_dynamic:
        step("dequantizing dynamic quantization (opt-in, not exact)")
        dequantized = inexact.dequantize_dynamic(model, settings, report, counter, feeds.get)
        if dequantized is not model:
            model, before = dequantized, _check(dequantized, settings.trt)
    if settings.simplify:
        step("simplifying (onnxsim)")
        simplified = _simplify(model, settings, report, counter, feeds, before, source)
        if simplified is not model:
            model, before = simplified, _check(simplified, settings.trt)
            if not settings.dequantize_dynamic:
                summary_before = before  # --simplify's summary counts from the simplified model (as it always did)
    chosen = choose_passes(model, settings, before)

    step("importing the graph")
    # with the collector off; it never rescans the imported objects
    graph = to_graph(model, freeze=True, infos=None if checks is None else checks.infos)
    if checks is not None:
        checks.settle()
    try:
        log = EditLog()
        decided = discrete.find(graph) if settings.verify else ([], {})
        if settings.verify and settings.verify_each:
            return _requantized(_verify_each(model, graph, chosen, settings, report, feeds, counter, log, start, step, before),
                                settings, counter, feeds, step, summary_before, start)
        run_passes(graph, chosen, settings, log, report, step)
        baseline = final_results = fixed = None
        if settings.verify and not any(not e.undone for e in log.edits):
            feeds.unused()
        elif settings.verify:
            baseline, final_results, fell_back, fixed = verify_regions(model, graph, log, settings, report, feeds.get(decided),
                                                                        counter, source, decided, step)
            if fell_back:
                gc.unfreeze()
                report.passes.clear()
                report.nodes.clear()
                counter.count = 0
                report.verification = "pass by pass (fallback: the end-to-end run disagreed although every region agreed)"
                return _requantized(_verify_each(model, to_graph(model), chosen, settings, report, feeds, counter, EditLog(),
                                                 start, step, before), settings, counter, feeds, step, summary_before, start)
        step("exporting the fixed model")
        if fixed is None:  # verification exports the model it checks: that one is returned
            fixed = to_parts(graph, model) if any(not e.undone for e in log.edits) else model
    finally:
        gc.unfreeze()  # the graph's cycles go with the next automatic collection: forcing one here
        # cost 0.6 s on a 100k-node export and lowered no peak (measured: bench/scale.py)
    report.sessions = counter.count
    if not counter.tuned:
        report.notes.append(sessions_mod.DEFAULT_SETTINGS_NOTE)
    outcome = Outcome(fixed, report, feeds.chosen or [], baseline, final_results)
    if settings.trt is not None and not settings.requantize_symmetric:
        step(f"checking the fixed model for TensorRT {settings.trt}")
        after = check_fixed(graph, fixed, settings.trt) if isinstance(fixed, Assembled) else _check(fixed, settings.trt)
        report.trt = trt_summary(summary_before, after, settings.trt)
    report.seconds = round(time.perf_counter() - start, 4)
    return _requantized(outcome, settings, counter, feeds, step, summary_before, start)


def _requantized(outcome: Outcome, settings: Settings, counter: sessions_mod.SessionCounter, feeds: _LazyFeeds, step,
                 before, start: float) -> Outcome:
    """``--requantize-symmetric`` on the fixed model (after the passes, whose Q/DQ it reads), then
    the TensorRT summary of what is written; ``outcome`` as it is without the option."""
    if not settings.requantize_symmetric:
        return outcome
    report = outcome.report
    step("re-quantizing asymmetric Q/DQ symmetrically (opt-in, not exact)")
    fixed = outcome.model
    requantized = inexact.requantize_symmetric(fixed, settings, report, counter, lambda: outcome.feeds or feeds.get())
    if requantized is not fixed:
        outcome.fixed, outcome.final = requantized, None
        outcome.feeds = outcome.feeds or feeds.chosen or []
    report.sessions = counter.count
    if settings.trt is not None:
        step(f"checking the fixed model for TensorRT {settings.trt}")
        report.trt = trt_summary(before, _check(outcome.model, settings.trt), settings.trt)
    report.seconds = round(time.perf_counter() - start, 4)
    return outcome


def _refuse_early(model: onnx.ModelProto, settings: Settings) -> None:
    """Names and shapes that do not fit the model, refused before the first phase starts: a
    refused run says one line, not the phases it went through first."""
    names = settings.passes
    if not _auto(settings) and (isinstance(names, str) or not any(isinstance(n, Pass) for n in names)):
        registry.select(names, settings.skip)
    elif settings.skip:
        registry.select("all", settings.skip)
    if settings.fix_shapes:

        fix_shapes.check(model, settings.fix_shapes)
    if settings.verify and not settings.feeds:
        for shapes in settings.input_shapes or [{}]:
            inputs_mod.check_val_range(inputs_mod.input_metadata(model, shapes), settings.val_range)
