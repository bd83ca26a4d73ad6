"""Verification of rewritten regions: probes, the pass-by-pass fallback, the users' default
onnxruntime settings, end to end.
"""

from __future__ import annotations

import time
from typing import Any

import onnx

from graphfix.analysis import discrete
from graphfix.errors import GraphfixError, first_line
from graphfix.graph import to_model
from graphfix.graph.convert import to_parts
from graphfix.onnxio.proto import Assembled
from graphfix.onnxio.validate import passes_full_check
from graphfix.pipeline.checks import _check, _invalid, trt_summary
from graphfix.pipeline.manager import charge_rollback, node_record, run_passes
from graphfix.pipeline.settings import Outcome, Settings, StrictFailure
from graphfix.report.model import KEPT, ROLLED_BACK, UNVERIFIED, PassRecord, Report
from graphfix.verify import compare as compare_mod
from graphfix.verify import precision as precision_mod
from graphfix.verify import regions as regions_mod
from graphfix.verify import sessions as sessions_mod
from graphfix.verify import spill


def verify_regions(model, graph, log, settings, report, feeds, counter, source, decided=([], {}), step=lambda what: None):
    """Probe session + end-to-end session. Returns (baseline, final, fell_back, the fixed model).
    ``decided``: the original's decisions and the outputs depending on them (graphfix.analysis.discrete).
    ``step`` hears each phase and, every 1/100 of them, how many regions were compared (a
    100k-node run spends tens of seconds here)."""
    originals = regions_mod.original_names(model)
    regs = regions_mod.regions(log.edits, graph, originals)
    step(f"verification probe run on onnxruntime ({len(regs)} regions)")
    decisions, depends = decided if decided[1] else ([], {})
    probe = regions_mod.probe_model(model, regs, discrete.exposed(decisions))
    try:
        probe_results = sessions_mod.run(probe, feeds, "graphfix-probe", counter, settings.base_dir)
    except Exception as exc:  # noqa: BLE001
        try:
            sessions_mod.run(model, feeds, "original", counter, settings.base_dir)
        except Exception as exc2:  # noqa: BLE001
            raise GraphfixError(
                f"onnxruntime cannot run the input model, so rewrites cannot be verified ({first_line(exc2)}); "
                "fix the inputs (--input-shapes/--val-range/--load-inputs) or use --no-verify", source) from exc2
        report.notes.append(f"the probe model could not run ({first_line(exc)}); checking pass by pass")
        return None, None, True, None
    by_pass = {r.name: r for r in report.passes}
    every = max(1, len(regs) // 100)
    first_entry = len(report.nodes)
    for k, r in enumerate(regs):
        if k % every == 0:
            step(f"comparing {len(regs)} regions: {k} done")
        records = compare_mod.region_diffs(probe_results, r.probes, *settings.tol, settings.automatic_tolerance,
                                           r.precision) if not r.unchecked else {}
        bad = {k: d for k, d in records.items() if not d.passed}
        worst = ", ".join(f"{k} (max abs {d.max_abs:.3g}, max rel {d.max_rel:.3g})" for k, d in bad.items())
        entry = node_record(r, ROLLED_BACK if bad else KEPT, r.unchecked or "on its own, on the original model's tensors",
                             f"outputs differ: {worst}" if bad else "", {k: d.as_dict() for k, d in records.items()})
        report.nodes.append(entry)
        for name in r.passes:
            rec = by_pass[name]
            for k, d in records.items():
                prev = rec.outputs.get(k)
                if prev is None or d.max_abs > prev["max_abs"]:
                    rec.outputs[k] = d.as_dict()
        if bad:
            if settings.strict:
                raise StrictFailure(f"--strict: {', '.join(entry['nodes'])} ({', '.join(r.passes)}) would be rolled back", source)
            r.undo()
            charge_rollback(by_pass, r, f"{', '.join(entry['nodes'])}: outputs differ: {worst}", settle=False)
    for rec in report.passes:
        if rec.verdict == UNVERIFIED:
            rec.verdict = ROLLED_BACK if rec.rolled_back_nodes >= rec.rewritten else KEPT
    # what is read after the regions, copied out of the probe run's mapping, which goes with the
    # regions' tensors in it (a big output's rewritten copy stayed resident through the end); the
    # big outputs to a temporary file, let go of after each comparison (graphfix.verify.spill)
    probe_results = spill.spilled(probe_results, [*(o.name for o in model.graph.output), *discrete.exposed(decisions)])
    baseline = compare_mod.select_outputs(probe_results, [o.name for o in model.graph.output])
    live = [e for e in log.edits if not e.undone]
    if not live:
        return baseline, baseline, False, model
    parts = to_parts(graph, model)
    fixed = parts.proto() if isinstance(parts, Assembled) else parts
    invalid = _invalid(fixed, passes_full_check(model), model, report)
    if invalid:
        report.notes.append(f"the fixed model is invalid ({invalid}); checking pass by pass")
        return baseline, None, True, None
    step("end-to-end run of the fixed model")
    try:
        final = sessions_mod.run(_exposing(fixed, discrete.exposed(decisions)), feeds, "graphfix-fixed", counter, settings.base_dir)
    except Exception as exc:  # noqa: BLE001
        report.notes.append(f"onnxruntime cannot run the fixed model ({first_line(exc)}); checking pass by pass")
        return baseline, None, True, None
    if decisions:
        report.discrete = discrete.judge(decisions, depends, compare_mod.iterations(probe_results), compare_mod.iterations(final))
        final = compare_mod.select_outputs(final, [o.name for o in model.graph.output])
    diffs = end_to_end(model, baseline, final, settings, feeds, counter, report)
    spill.release(baseline)  # read again only after an undo under the users' settings
    report.final = {k: d.as_dict() for k, d in diffs.items()}
    if not all(d.passed for d in diffs.values()):
        return baseline, None, True, None
    entries = dict(zip(map(id, regs), report.nodes[first_entry:], strict=True))
    reference = _users_reference(model, settings, report, feeds, counter, step)
    if reference is None:
        return baseline, final, False, parts
    del final  # not read again: the runs under the users' settings take its place (a big output's run goes)
    return _users_settings(model, graph, log, regs, entries, parts, settings, report, feeds, counter, baseline, reference, step)


def _users_reference(model, settings: Settings, report: Report, feeds, counter, step):
    """The original's run under the settings users run (:func:`_users_settings`), or None when
    there is nothing to compare there (report.users says why)."""
    if not counter.tuned or not sessions_mod.on_onnxruntime(model):
        report.users = {"settings": "verification's own (onnxruntime's defaults, or not onnxruntime): nothing to add",
                        "outputs": {}}
        return None
    step("end-to-end run under onnxruntime's default settings")
    try:
        return compare_mod.first_iterations(sessions_mod.switched_run(model, feeds, counter, settings.base_dir), len(feeds))
    except GraphfixError:
        raise
    except Exception as exc:  # noqa: BLE001 - an optimizer that fails on the input itself: nothing to compare with
        report.users = {"settings": sessions_mod.USERS_SETTINGS, "outputs": {}, "skipped": first_line(exc)}
        report.notes.append(f"onnxruntime cannot run the input model under {sessions_mod.USERS_SETTINGS} ({first_line(exc)}): "
                            "the written model was compared under verification's settings only")
        return None


def _users_settings(model, graph, log, regs, entries, parts, settings: Settings, report: Report, feeds, counter,
                    baseline, reference, step):
    """The written model against the original once more, under the settings users run
    (onnxruntime's defaults, graph optimizations on: polygraphy's onnxrt runner, a plain
    InferenceSession). Verification's sessions switch the optimizer off, and an optimizer rule can
    read a rewrite otherwise: DivMulFusion turned an integer ``Div(1, x)`` feeding a ``Mul`` into
    ``Div(y, x)`` (issue 22: a Swin export off by 0.2, exact in graphfix's own sessions). Two
    sessions: the original's run doubles as the noise floor's (sessions_mod.switched_run). A difference
    under these settings only is blamed on the regions that differ in the probe run under them,
    which are undone and named. Returns verify_regions' tuple with the results under the users'
    settings: the reference outputs written for polygraphy come from the configuration it runs
    (``reference``: the original's run there, :func:`_users_reference`)."""
    diffs, results = users_diffs(model, reference, parts, settings, report, feeds, counter)
    spill.release(reference)  # read again only after an undo
    report.users = {"settings": sessions_mod.USERS_SETTINGS, "outputs": {k: d.as_dict() for k, d in diffs.items()}}
    if all(d.passed for d in diffs.values()):
        return reference, results, False, parts
    worst = ", ".join(f"{k} (max abs {d.max_abs:.3g}{'; ' + d.note if d.note else ''})" for k, d in diffs.items() if not d.passed)
    report.notes.append(f"the fixed model agreed with the original in verification's sessions (graph optimizations off) "
                        f"but not under {sessions_mod.USERS_SETTINGS}: {worst}; the regions that differ there are undone")
    undone = _undo_under_users_settings(model, regs, entries, settings, report, feeds, counter, step)
    report.users["rolled_back"] = undone
    if not any(not e.undone for e in log.edits):
        return reference, reference, False, model
    parts = to_parts(graph, model)
    fixed = parts.proto() if isinstance(parts, Assembled) else parts
    step("end-to-end run of the fixed model (again)")
    try:
        final = sessions_mod.run(fixed, feeds, "graphfix-fixed", counter, settings.base_dir)
    except Exception as exc:  # noqa: BLE001
        report.notes.append(f"onnxruntime cannot run the fixed model ({first_line(exc)}); checking pass by pass")
        return baseline, None, True, None
    report.final = {k: d.as_dict() for k, d in end_to_end(model, baseline, final, settings, feeds, counter, report).items()}
    diffs, results = users_diffs(model, reference, fixed, settings, report, feeds, counter)
    report.users["outputs"] = {k: d.as_dict() for k, d in diffs.items()}
    if not all(d["passed"] for d in [*report.final.values(), *report.users["outputs"].values()]):
        return baseline, None, True, None
    return reference, results, False, parts


def users_diffs(model, reference, fixed, settings: Settings, report: Report, feeds, counter):
    """The fixed model under the users' settings against ``reference`` (the original's run there):
    (per-output differences, its results). A fixed model those settings cannot run differs on
    every output (results None)."""
    try:
        results = sessions_mod.users_run(fixed, feeds, "graphfix-fixed", counter, settings.base_dir)
    except GraphfixError:
        raise
    except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types
        why = f"onnxruntime cannot run it there ({first_line(exc)})"
        return {o.name: compare_mod.OutputDiff(float("inf"), float("inf"), False, why) for o in model.graph.output}, None
    diffs = end_to_end(model, reference, results, settings, feeds, counter, report)
    _ties_in_another_order(diffs, reference, results, settings, report)
    return diffs, results


def _ties_in_another_order(diffs: dict[str, compare_mod.OutputDiff], reference, results, settings: Settings, report: Report) -> None:
    """Under the users' settings, an output that depends on a TopK/ArgMax/comparison (found by
    graphfix.analysis.discrete) can come out with near-tied elements in another order: onnxruntime's
    optimizer changes the rounding that breaks the tie, in the original as in the fixed model (an
    NMS-free YOLO head, TopK 300 of 8400: the untouched original, default settings vs optimizations
    off, max abs 164, sorted scores equal to 1.2e-7). The rewrites were judged exactly in
    verification's own sessions; here such an output passes when its sorted values agree, with a
    note that says why, and the report says how to compare it with another runtime."""
    depends = (report.discrete or {}).get("outputs", {})
    failing = [k for k, d in diffs.items() if not d.passed and k in depends]
    if not failing:
        return
    ordered = compare_mod.sorted_diffs(reference, results, failing, *settings.tol, report.noise_floor, report.precision)
    for name in failing:
        d, s = diffs[name], ordered[name]
        if not s.passed:
            continue
        d.passed = True
        d.note = (f"tie-sensitive (depends on {', '.join(depends[name])}): near-tied elements in another order "
                  f"(element by element max abs {d.max_abs:.3g}); as sorted values max abs {s.max_abs:.3g}")
        report.notes.append(f"output {name} is tie-sensitive: it depends on {', '.join(depends[name])}, and near-tied "
                            "elements come out in another order under another runtime's rounding, so an element-by-element "
                            "comparison (polygraphy run --trt ... --load-outputs) can fail where the model is right; compare "
                            "its sorted values, or its indices with polygraphy's --compare-func indices")


def _undo_under_users_settings(model, regs, entries, settings: Settings, report: Report, feeds, counter, step) -> int:
    """The probe under the users' settings: each live region whose rewritten tensors differ from the
    original ones there is undone, its record says why (every live region when none does: the
    difference is then in how the optimizer reads the whole). Returns how many were undone."""
    live = [r for r in regs if not any(e.undone for e in r.edits)]
    step(f"probe run under onnxruntime's default settings ({len(live)} regions)")
    try:
        ran = sessions_mod.users_run(regions_mod.probe_model(model, live), feeds, "graphfix-probe", counter, settings.base_dir)
    except GraphfixError:
        raise
    except Exception:  # noqa: BLE001 - no region can be singled out: every live one is undone
        ran = None
    blamed = {}
    for r in live:
        if r.unchecked or ran is None:
            continue
        bad = {k: d for k, d in compare_mod.region_diffs(ran, r.probes, *settings.tol, settings.automatic_tolerance,
                                                         r.precision).items() if not d.passed}
        if bad:
            blamed[id(r)] = ", ".join(f"{k} (max abs {d.max_abs:.3g})" for k, d in bad.items())
    whole = "the whole fixed model differs there and no single region does"
    by_pass = {rec.name: rec for rec in report.passes}
    for r in live:
        if blamed and id(r) not in blamed:
            continue
        why = f"differs only under {sessions_mod.USERS_SETTINGS}: {blamed.get(id(r), whole)}"
        if settings.strict:
            raise StrictFailure(f"--strict: {', '.join(f'{e.node.op} {e.node.name!r}' for e in r.edits)} ({', '.join(r.passes)}) "
                                f"would be rolled back: it {why}")
        entry = entries.get(id(r))
        if entry is not None:
            entry.update(verdict=ROLLED_BACK, reason=why)
        r.undo()
        charge_rollback(by_pass, r, why)
    return len(blamed) or len(live)


def _verify_each(model, graph, chosen, settings, report, feeds, counter, log, start, step, before=None) -> Outcome:
    """Whole-pass checking (debugging, fallback): one session for the input plus one per changed
    pass, and as many again under the settings users run (a pass kept only when it agrees under
    both: see _users_settings). The runs kept from one pass to the next wait in a spill file
    (graphfix.verify.spill), let go of after each comparison: a big output's runs, four of them
    held at once, were 4.1 times the output in graphfix's process."""
    if not report.verification:
        report.verification = "pass by pass (--verify-each)"
    state: dict[str, Any] = {"results": None, "users": None}
    users = counter.tuned and sessions_mod.on_onnxruntime(model)

    def users_check(candidate) -> str:
        """Why ``candidate`` differs under the users' settings only ("" when it does not)."""
        if state["users"] is None:
            state["users_ref"] = compare_mod.first_iterations(sessions_mod.switched_run(model, state["feeds"], counter, settings.base_dir),
                                                         len(state["feeds"]))
        diffs, users = users_diffs(model, state["users_ref"], candidate, settings, report, state["feeds"], counter)
        state["users"] = None if users is None else spill.spilled(users)
        spill.release(state["users_ref"])
        report.users = {"settings": sessions_mod.USERS_SETTINGS, "outputs": {k: d.as_dict() for k, d in diffs.items()}}
        bad = [f"{k} (max abs {d.max_abs:.3g}{'; ' + d.note if d.note else ''})" for k, d in diffs.items() if not d.passed]
        return f"differs only under {sessions_mod.USERS_SETTINGS}: {', '.join(bad)}" if bad else ""

    def reference() -> Any:
        """The original's outputs, run when the first pass changed something (feeds chosen then;
        the checker's depth too: it asks onnxruntime which IR version it loads)."""
        if state["results"] is None:
            step("original model on onnxruntime")
            state["full_check"] = passes_full_check(model)
            state["feeds"] = feeds.get()
            state["baseline"] = state["results"] = spill.spilled(sessions_mod.run(model, state["feeds"], "original", counter,
                                                                                 settings.base_dir))
        return state["baseline"]

    def check(record: PassRecord, edits) -> None:
        baseline = reference()
        feeds_now = state["feeds"]
        step(f"running passes: verifying {record.name}")
        candidate = to_model(graph, model)
        reason = _invalid(candidate, state["full_check"], model, report)
        results = None
        if not reason:
            try:
                results = sessions_mod.run(candidate, feeds_now, record.name, counter, settings.base_dir)
            except Exception as exc:  # noqa: BLE001
                reason = f"onnxruntime cannot run the rewritten model ({first_line(exc)})"
        if results is not None:
            diffs = end_to_end(model, baseline, results, settings, feeds_now, counter, report)
            spill.release(baseline)
            results = spill.spilled(results)
            record.outputs = {k: d.as_dict() for k, d in diffs.items()}
            bad = [k for k, d in diffs.items() if not d.passed]
            if bad:
                reason = "outputs differ beyond atol={:g}/rtol={:g}: {}".format(*settings.tol, ", ".join(
                    f"{k} (max abs {diffs[k].max_abs:.3g}, max rel {diffs[k].max_rel:.3g}{'; ' + diffs[k].note if diffs[k].note else ''})" for k in bad))
            elif users:
                kept_users = state["users"]
                reason = users_check(candidate)
                if reason:
                    state["users"] = kept_users  # the last kept state's results stay the reference's partner
        if reason:
            for e in reversed(edits):
                e.undo()
            record.verdict, record.reason = ROLLED_BACK, f"rolled back: {reason}"
            record.nodes_after = record.nodes_before
        else:
            record.verdict = KEPT
            state["results"] = results

    if run_passes(graph, chosen, settings, log, report, step, after_pass=check):  # regions undone after checking
        fixed = to_model(graph, model)
        baseline = reference()
        state["results"] = sessions_mod.run(fixed, state["feeds"], "graphfix-fixed", counter, settings.base_dir)
        diffs = end_to_end(model, baseline, state["results"], settings, state["feeds"], counter, report)
        spill.release(baseline)
        state["results"] = spill.spilled(state["results"])
        report.final = {k: d.as_dict() for k, d in diffs.items()}
        if users and state["users"] is not None:
            users_check(fixed)
    fixed = to_model(graph, model) if any(not e.undone for e in log.edits) else model
    if "baseline" not in state:
        feeds.unused()
    report.sessions = counter.count
    if settings.trt is not None:
        report.trt = trt_summary(before or _check(model, settings.trt), _check(fixed, settings.trt), settings.trt)
    report.seconds = round(time.perf_counter() - start, 4)
    if state["users"] is not None:  # the polygraphy side files: the results under the users' settings
        return Outcome(fixed, report, state["feeds"], state["users_ref"], state["users"])
    return Outcome(fixed, report, state.get("feeds", []), state.get("baseline"), state["results"])


def end_to_end(model, baseline, results, settings: Settings, feeds, counter, report: Report) -> dict[str, compare_mod.OutputDiff]:
    """The fixed (or partly fixed) model's outputs against the original's: at the tolerance in
    force, and with the automatic tolerance, where that fails, within NOISE_MULTIPLE times the
    original model's own noise floor (measured once per run, reported as ``noise_floor``). An output
    computed through float16/bfloat16 (``report.precision``) allows for that type's rounding."""
    diffs = compare_mod.compare(baseline, results, *settings.tol, precision=report.precision)
    if not all(d.passed for d in diffs.values()) and report.precision is None:
        report.precision = precision_mod.computed_in(model)
        if report.precision:
            diffs = compare_mod.compare(baseline, results, *settings.tol, precision=report.precision)
    if not all(d.passed for d in diffs.values()) and settings.automatic_tolerance:
        if report.noise_floor is None:
            report.noise_floor = sessions_mod.noise_floor(model, feeds, baseline, counter, settings.base_dir)
        diffs = compare_mod.compare(baseline, results, *settings.tol, report.noise_floor, report.precision)
    for name, d in diffs.items():  # an output that follows near-tie flips of its decisions
        if not d.passed and report.discrete and discrete.explained(report.discrete, name):
            d.passed, d.note = True, "differs where a decision it depends on flipped at a near-tie (see discrete)"
    return diffs


def _exposing(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto | Assembled:
    """``model`` with these tensors (where it computes them) as extra outputs, weights not copied."""
    if not names:
        return model
    computed = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    parts = Assembled.of(model, to_edit=True)
    have = {o.name for o in parts.stub.graph.output}
    parts.stub.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names if n in computed and n not in have)
    return parts
