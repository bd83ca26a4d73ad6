"""The ordered pass pipeline: one graph through every pass, then node-level verification.

The model is imported once (one shape inference, ``gc.freeze()`` so the collector does not
rescan the big import), every pass edits the same onnx-graphsurgeon graph, and the graph is
exported once at the end. Each pass's contract is checked as it runs (:func:`_ensure`): nothing
it matches is left unreported, the graph's inputs/outputs keep their names, dtypes and shapes.

Verification runs after the passes, and only when something was rewritten: a run whose passes
changed nothing opens no onnxruntime session (no shape search either). Otherwise it costs at
most four sessions whatever the number of passes (``graphfix.regions``): the *probe* (the
original model plus a renamed copy of every rewritten region, wired to the original tensors)
computes, in one run, the original outputs and each region's original and rewritten values; a
region that differs is undone alone (node-level rollback, named in the report); one end-to-end
run of the fixed model confirms the whole; then the original and the fixed model run once more
under the settings users run (onnxruntime's defaults, graph optimizations on), where an
optimizer rule may read a rewrite otherwise. Should the final run disagree although every
region agreed, graphfix falls back to checking pass by pass (``verify_each``, one session per
changed pass), and says so. Shapes: several (see ``graphfix.shapes``); the candidate-shape
search runs on its own session, reported apart.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from graphfix import discrete, verify
from graphfix import passes as registry
from graphfix import regions as regions_mod
from graphfix import shapes as shapes_mod
from graphfix.errors import GraphfixError
from graphfix.graph import Builder, Folder, to_graph, to_model
from graphfix.graph.convert import all_graphs, to_parts
from graphfix.graph.edits import EditLog, live_nodes
from graphfix.model_io import (
    Assembled,
    checker_problem,
    declared_shapes,
    default_opset,
    first_line,
    passes_full_check,
    relaxed_problem,
    runtime_compatible,
)
from graphfix.passes.base import Context, Pass
from graphfix.report import ERROR, KEPT, ROLLED_BACK, UNCHANGED, UNVERIFIED, PassRecord, Report
from graphfix.trt.versions import TrtVersion


class StrictFailure(GraphfixError):
    """--strict: a rewrite would have been rolled back (exit 1, nothing written)."""

    exit_code = 1


@dataclass
class Settings:
    """Every run setting, declared once: the CLI's flags, the API's keywords and the report's "settings"."""

    passes: str | list[str | Pass] | tuple[str | Pass, ...] = "all"
    skip: tuple[str, ...] = ()
    trt: str | None = None
    force: tuple[str, ...] = ()
    verify: bool = True
    verify_each: bool = False
    strict: bool = False
    #: None: automatic (verify.DEFAULT_TOLERANCE, widened to rounding and the model's noise floor)
    atol: float | None = None
    rtol: float | None = None
    seed: int = 1
    iterations: int = 1
    input_shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    #: the TensorRT profile's min/opt/max shapes: verified too where onnxruntime runs them
    profile_shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    #: --fix-shapes: input dims frozen in the written model, shape arithmetic folded (verified)
    fix_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: --simplify: onnxsim first, verified and rolled back like a pass (needs graphfix[simplify])
    simplify: bool = False
    val_range: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: --max-memory: the estimated peak bytes of one run at a candidate verification shape
    max_memory: int = shapes_mod.DEFAULT_MAX_MEMORY
    feeds: list[dict[str, np.ndarray]] | None = None
    #: the folder the model's external-data locations are relative to (None: no external data)
    base_dir: str | None = None

    @property
    def tol(self) -> tuple[float, float]:
        """(atol, rtol) in force: the given ones, else verify.DEFAULT_TOLERANCE."""
        return (verify.DEFAULT_TOLERANCE if self.atol is None else self.atol,
                verify.DEFAULT_TOLERANCE if self.rtol is None else self.rtol)

    @property
    def automatic_tolerance(self) -> bool:
        """Neither given: regions allow their own rounding, end to end the model's noise floor."""
        return self.atol is None and self.rtol is None

    def public(self) -> dict[str, Any]:
        return {
            "passes": self.passes if isinstance(self.passes, str) else [getattr(p, "name", p) for p in self.passes],
            "skip": list(self.skip), "trt": self.trt, "force": list(self.force), "verify": self.verify,
            "verify_each": self.verify_each, "strict": self.strict, "atol": self.atol, "rtol": self.rtol,
            "seed": self.seed, "iterations": self.iterations,
            "input_shapes": [{k: list(v) for k, v in s.items()} for s in self.input_shapes],
            "fix_shapes": {k: list(v) for k, v in self.fix_shapes.items()}, "simplify": self.simplify,
            "val_range": {k: list(v) for k, v in self.val_range.items()}, "max_memory": self.max_memory,
        }


@dataclass
class Outcome:
    fixed: onnx.ModelProto | Assembled  # Assembled: the input's weights not copied (save_model streams them)
    report: Report
    feeds: list[dict[str, np.ndarray]]
    baseline: Any = None  # polygraphy RunResults of the input model
    final: Any = None  # RunResults of the returned model
    base_dir: str | None = None  # where the model's external data lives

    @property
    def model(self) -> onnx.ModelProto:
        """The fixed model as one ModelProto (built on first use when its weights are the input's)."""
        return self.fixed.proto() if isinstance(self.fixed, Assembled) else self.fixed


def _trt_version(text: str | None) -> TrtVersion | None:
    if text is None:
        return None
    try:
        return TrtVersion(text)
    except ValueError as exc:
        raise GraphfixError(f"--trt: {exc}") from exc


def choose_passes(model: onnx.ModelProto, settings: Settings, before=None) -> list[Pass]:
    """The passes to run, in order (``before``: the input's check report for ``settings.trt``,
    when already made)."""
    names = settings.passes
    if _auto(settings):
        if settings.trt is None:
            raise GraphfixError("--passes auto needs --trt VERSION (the TensorRT release to target)")
        from graphfix.trt.check import check_model, passes_for

        wanted = passes_for(before or check_model(model, settings.trt))
        return [p for p in registry.select("all", settings.skip) if p.name in wanted]
    if not isinstance(names, str) and any(isinstance(n, Pass) for n in names):
        custom = [n if isinstance(n, Pass) else registry.get(n) for n in names]
        return [p for p in custom if p.name not in settings.skip]  # your own list runs as given
    return registry.select(names, settings.skip)


def _auto(settings: Settings) -> bool:
    names = settings.passes
    return (isinstance(names, str) and names.strip() == "auto") or list(names) == ["auto"]


# ---------------------------------------------------------------------- passes on one graph
def _signature(graph: gs.Graph) -> list[tuple]:
    return [(t.name, str(t.dtype), tuple(t.shape) if t.shape is not None else None) for t in [*graph.inputs, *graph.outputs]]


def _ensure(p: Pass, graph: gs.Graph, trt: TrtVersion | None, force: bool, skipped: set[str], signature: list[tuple]) -> str:
    """The pass's post-condition: what is still wrong, or ""."""
    if _signature(graph) != signature:
        return "graph inputs/outputs changed (names, dtypes or shapes)"
    for g in all_graphs(graph):
        g.opset = graph.opset
        ctx = Context(g, Builder(g, "ensure"), Folder(g), None if force else trt, force)
        left = [n for n in g.nodes if n.op in p.ops and (n.name or n.op) not in skipped and p.match(n, ctx)]
        if left:  # replaced nodes stay in g.nodes until export: only live ones count
            live = live_nodes(g)
            left = [n for n in left if id(n) in live]
        if left:
            return f"{len(left)} node(s) it matches are left unreported, e.g. {left[0].op} '{left[0].name}'"
    return ""


def op_counts(graph: gs.Graph) -> Counter:
    """How many nodes of each op type the graph and its bodies hold (a pass whose ops are absent is
    skipped without a scan; counts only grow, as replaced nodes stay until cleanup)."""
    return Counter(n.op for g in all_graphs(graph) for n in g.nodes)


#: Rounds of the pass list at most: a pass may emit what an earlier pass rewrites (cumsum-decompose's
#: integer Mod after mod-decompose ran), so the list runs again on what the last round added.
MAX_ROUNDS = 4


def _run_passes(graph: gs.Graph, chosen: list[Pass], settings: Settings, log: EditLog, report: Report,
                step, after_pass=None) -> int:
    """The passes in order, then again on what they added, until a round rewrites nothing: running
    graphfix on its own output then changes nothing. With ``--passes auto`` the later rounds may
    use any pass (what a rewrite emits can need one the input did not)."""
    trt = _trt_version(settings.trt)
    signature = _signature(graph)
    counts = op_counts(graph)
    records: dict[str, PassRecord] = {}
    todo = chosen
    for _round in range(MAX_ROUNDS):
        mark = len(log.edits)
        for p in todo:
            record = records.get(p.name)
            if record is None:
                record = PassRecord(p.name, UNCHANGED)
            _run_pass(p, graph, record, settings, trt, signature, counts, log, step, after_pass)
            if p.name not in records and (_round == 0 or record.matched or record.verdict != UNCHANGED):
                records[p.name] = record  # a later round's pass is listed only when it found something
                report.passes.append(record)
        added = {n.op for e in log.edits[mark:] if not e.undone for n in e.added}
        todo = [p for p in (registry.select("all", settings.skip) if _auto(settings) else chosen) if p.ops & added]
        if not todo:
            break
    else:
        report.notes.append(f"passes still rewrote after {MAX_ROUNDS} rounds ({', '.join(p.name for p in todo)}): "
                            "a second graphfix run may change the output again")
    return _undo_new_blockers(graph, log, report, settings.trt) if trt is not None else 0


def _undo_new_blockers(graph: gs.Graph, log: EditLog, report: Report, trt: str) -> int:
    """A rewrite may not leave a node the target rejects (reduce-axes-input's TopK on INT64 before
    8.6, a Pad with computed pads before 8.0): the region that added it is undone, with the reason.
    Returns how many regions were undone."""
    from graphfix.trt.check import BLOCKING, check_nodes

    live = set().union(*(live_nodes(g) for g in all_graphs(graph)))
    added = {id(n): (e, n) for e in log.edits if not e.undone for n in e.added if id(n) in live}
    if not added:
        return 0
    findings = check_nodes(graph, [(e.graph, n) for e, n in added.values()], trt)
    by_name = {n.name: e for e, n in added.values()}
    blamed = {}
    for f in findings:
        if f.severity == BLOCKING and f.node in by_name:
            blamed.setdefault(id(by_name[f.node]), f)
    if not blamed:
        return 0
    by_pass = {r.name: r for r in report.passes}
    undone = 0
    for region in regions_mod.regions(log.edits, graph, set()):
        f = next((blamed[id(e)] for e in region.edits if id(e) in blamed), None)
        if f is None:
            continue
        report.nodes.append(_node_record(region, ROLLED_BACK, "not compared (undone before verification)",
                                         f"emits {f.op} {f.node!r}, which TensorRT {trt} rejects ({f.message})"))
        region.undo()
        undone += 1
        why = f"{', '.join(f'{e.node.op} {e.node.name!r}' for e in region.edits)}: emits {f.op} {f.node!r}, which TensorRT {trt} rejects ({f.message})"
        _charge_rollback(by_pass, region, why)
    return undone


def _charge_rollback(by_pass: dict[str, PassRecord], region: regions_mod.Region, why: str, settle: bool = True) -> None:
    """An undone region's passes: its nodes counted as rolled back and ``why`` added to their
    reason; with ``settle``, a pass whose every rewrite is undone is marked rolled back."""
    for name in region.passes:
        rec = by_pass[name]
        rec.rolled_back_nodes += sum(e.pass_name == name for e in region.edits)
        rec.reason = (rec.reason + "; " if rec.reason else "rolled back: ") + why
        if settle and rec.rolled_back_nodes >= rec.rewritten:
            rec.verdict = ROLLED_BACK


def _node_record(region: regions_mod.Region, verdict: str, checked: str, reason: str = "", outputs=None) -> dict[str, Any]:
    """The report's record of one rewritten region: its passes, the nodes it replaced (op and
    name), what was compared, the verdict, why it was undone, its before/after diagram and cost
    (FLOPs and bytes before/after; both read before any undo: they read the live rewrite)."""
    record = {"passes": region.passes, "nodes": [f"{e.node.op} '{e.node.name}'" for e in region.edits],
              "outputs": outputs or {}, "verdict": verdict, "checked": checked, "diagram": regions_mod.diagram(region),
              "cost": regions_mod.cost(region)}
    if reason:
        record["reason"] = reason
    return record


def _run_pass(p: Pass, graph: gs.Graph, record: PassRecord, settings: Settings, trt: TrtVersion | None,
              signature: list[tuple], counts: Counter, log: EditLog, step, after_pass) -> None:
    step(f"running passes: {p.name}")
    t0 = time.perf_counter()
    mark = len(log.edits)
    again = record.verdict != UNCHANGED or record.matched  # a later round: add to the first round's record
    if not any(counts[o] for o in p.ops):
        if not again:
            record.nodes_before = record.nodes_after = len(graph.nodes)
        return
    force = p.name in settings.force
    nodes_before = len(graph.nodes)
    if not again:
        record.nodes_before = nodes_before
    verdict = UNCHANGED
    try:
        matched, rewritten, findings = p.run_on_graph(graph, trt, force, log)
    except GraphfixError:
        raise
    except Exception as exc:  # noqa: BLE001 - a buggy pass must not take the user's run down
        for e in reversed(log.edits[mark:]):
            e.undo()
        del log.edits[mark:]
        verdict, record.reason = ERROR, f"rolled back: the pass raised {type(exc).__name__}: {first_line(exc)}"
    else:
        record.matched += matched
        record.rewritten += rewritten
        known = {(f["node"], f["message"]) for f in record.findings}
        record.findings += [d for d in (f.as_dict() for f in findings) if (d["node"], d["message"]) not in known]
        broken = _ensure(p, graph, trt, force, {f.node or f.op for f in findings}, signature) if rewritten else ""
        if broken:
            for e in reversed(log.edits[mark:]):
                e.undo()
            del log.edits[mark:]
            verdict, record.reason = ROLLED_BACK, f"rolled back: the pass broke its contract: {broken}"
        elif rewritten:
            verdict = UNVERIFIED
    if verdict != UNCHANGED and not (again and verdict == UNVERIFIED and record.verdict != UNCHANGED):
        record.verdict = verdict
    if verdict == UNVERIFIED:
        record.nodes_after = len(graph.nodes)
    elif not again:
        record.nodes_after = nodes_before
    counts.update(n.op for e in log.edits[mark:] for n in e.added)
    record.seconds = round(record.seconds + time.perf_counter() - t0, 4)
    if after_pass is not None and verdict == UNVERIFIED:
        after_pass(record, log.edits[mark:])
    if settings.strict and verdict in (ROLLED_BACK, ERROR):
        raise StrictFailure(f"--strict: pass {p.name} {verdict}: {record.reason}")


# ---------------------------------------------------------------------------- entry point
def run(model: onnx.ModelProto, settings: Settings, source: str | None = None, target: str | None = None,
        progress=None) -> Outcome:
    start = time.perf_counter()
    _trt_version(settings.trt)
    for name in settings.force:
        registry.get(name)
    _refuse_early(model, settings)
    report = Report(source, target, settings.public())
    counter = verify.SessionCounter()
    step = progress or (lambda what: None)
    if settings.fix_shapes:
        step("fixing input shapes")
        model = _freeze(model, settings, report, counter)
    if settings.trt is not None:
        step(f"checking the model for TensorRT {settings.trt}")
    before = _check(model, settings.trt)  # once: it chooses the passes for auto and opens the summary

    feeds = _LazyFeeds(model, settings, report, source, counter, step)  # chosen when something needs them
    if settings.simplify:
        step("simplifying (onnxsim)")
        simplified = _simplify(model, settings, report, counter, feeds, before, source)
        if simplified is not model:
            model, before = simplified, _check(simplified, settings.trt)
    chosen = choose_passes(model, settings, before)

    step("importing the graph")
    graph = to_graph(model, freeze=True)  # with the collector off; it never rescans the imported objects
    try:
        log = EditLog()
        decided = discrete.find(graph) if settings.verify else ([], {})
        if settings.verify and settings.verify_each:
            return _verify_each(model, graph, chosen, settings, report, feeds, counter, log, start, step, before)
        _run_passes(graph, chosen, settings, log, report, step)
        baseline = final_results = fixed = None
        if settings.verify and not any(not e.undone for e in log.edits):
            feeds.unused()
        elif settings.verify:
            baseline, final_results, fell_back, fixed = _verify_regions(model, graph, log, settings, report, feeds.get(decided),
                                                                        counter, source, decided, step)
            if fell_back:
                gc.unfreeze()
                report.passes.clear()
                report.nodes.clear()
                counter.count = 0
                report.verification = "pass by pass (fallback: the end-to-end run disagreed although every region agreed)"
                return _verify_each(model, to_graph(model), chosen, settings, report, feeds, counter, EditLog(), start, step,
                                    before)
        step("exporting the fixed model")
        if fixed is None:  # verification exports the model it checks: that one is returned
            fixed = to_parts(graph, model) if any(not e.undone for e in log.edits) else model
    finally:
        gc.unfreeze()  # the graph's cycles go with the next automatic collection: forcing one here
        # cost 0.6 s on a 100k-node export and lowered no peak (measured: bench/scale.py)
    report.sessions = counter.count
    if not counter.tuned:
        report.notes.append(verify.DEFAULT_SETTINGS_NOTE)
    outcome = Outcome(fixed, report, feeds.chosen or [], baseline, final_results)
    if settings.trt is not None:
        step(f"checking the fixed model for TensorRT {settings.trt}")
        after = _check_fixed(graph, fixed, settings.trt) if isinstance(fixed, Assembled) else _check(fixed, settings.trt)
        report.trt = _trt_summary(before, after, settings.trt)
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
        from graphfix import fix_shapes

        fix_shapes.check(model, settings.fix_shapes)
    if settings.verify and not settings.feeds:
        for shapes in settings.input_shapes or [{}]:
            verify.check_val_range(verify.input_metadata(model, shapes), settings.val_range)


def _freeze(model: onnx.ModelProto, settings: Settings, report: Report, counter: verify.SessionCounter) -> onnx.ModelProto:
    """--fix-shapes as a verified step before the passes: the frozen model against the original
    at the frozen shapes (two sessions); kept only when they agree, else the original goes on."""
    from graphfix import fix_shapes

    t0 = time.perf_counter()
    frozen, gone = fix_shapes.freeze(model, settings.fix_shapes)
    feeds = settings.feeds or (verify.make_inputs(model, settings.fix_shapes, settings.val_range, settings.seed,
                                                  settings.iterations) if settings.verify else [])
    try:
        return _whole_model_step("fix-shapes", model, frozen, gone or len(settings.fix_shapes), feeds, settings, report, counter, t0)
    except verify.CannotRun as exc:
        raise GraphfixError(f"--fix-shapes: onnxruntime cannot run the model at {shapes_mod.describe(settings.fix_shapes)} "
                            f"({exc})") from exc


def _simplify(model: onnx.ModelProto, settings: Settings, report: Report, counter: verify.SessionCounter,
              feeds: _LazyFeeds, before, source: str | None = None) -> onnx.ModelProto:
    """--simplify (onnxsim) as a verified step; also rolled back when it writes an op the target
    (or, without one, the newest release) rejects. The feeds are chosen only when onnxsim changed
    the graph: a simplification that changes nothing costs no session. A model onnxruntime cannot
    run is refused as without --simplify (exit 2), not a bug."""
    from graphfix import simplify as simplify_mod

    t0 = time.perf_counter()
    try:
        simplified = simplify_mod.simplify(model)
    except simplify_mod.SimplifyFailed as exc:
        report.passes.append(PassRecord("simplify", ERROR, reason=f"not applied: onnxsim failed ({exc})"))
        return model
    from graphfix.trt.check import check_model
    from graphfix.trt.support import versions

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
    except verify.CannotRun as exc:
        raise GraphfixError(f"--simplify: onnxruntime cannot run the input model, so the simplified one cannot be verified "
                            f"({exc}); fix the inputs (--input-shapes/--val-range/--load-inputs) or use --no-verify",
                            source) from exc


def _same_graph(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    """Whether two models hold the same graph (their nodes and weights, compared as bytes)."""
    return len(a.graph.node) == len(b.graph.node) and \
        a.graph.SerializeToString(deterministic=True) == b.graph.SerializeToString(deterministic=True)


def _whole_model_step(name: str, model: onnx.ModelProto, candidate: onnx.ModelProto, rewritten: int, feeds, settings: Settings,
                      report: Report, counter: verify.SessionCounter, t0: float) -> onnx.ModelProto:
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
        try:
            original = verify.run(model, feeds, "original", counter, settings.base_dir)
            results = verify.run(candidate, feeds, name, counter, settings.base_dir)
        except GraphfixError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types
            raise verify.CannotRun(first_line(exc)) from exc
        diffs = _end_to_end(model, original, results, settings, feeds, counter, report)
        record.outputs = {k: d.as_dict() for k, d in diffs.items()}
        bad = [k for k, d in diffs.items() if not d.passed]
        if not bad and counter.tuned and verify.on_onnxruntime(model):
            try:
                reference = verify.first_iterations(verify.switched_run(model, feeds, counter, settings.base_dir), len(feeds))
            except GraphfixError:
                raise
            except Exception:  # noqa: BLE001 - the input itself does not run there: nothing to compare with
                reference = None
            users = _users_diffs(model, reference, candidate, settings, report, feeds, counter)[0] if reference else {}
            bad = [f"{k} only under {verify.USERS_SETTINGS}" for k, d in users.items() if not d.passed]
        record.verdict = ROLLED_BACK if bad else KEPT
        if bad:
            record.reason = f"rolled back: the {name} model's outputs differ ({', '.join(bad)})"
            record.nodes_after = record.nodes_before
    record.seconds = round(time.perf_counter() - t0, 4)
    return model if record.verdict == ROLLED_BACK else candidate


class _LazyFeeds:
    """Verification's feeds, chosen on first use: the shape search (a session of the input model,
    runs at candidate shapes) is paid only by a run that rewrote something (a pass, --simplify).
    A run whose passes changed nothing writes the model without opening a session."""

    def __init__(self, model: onnx.ModelProto, settings: Settings, report: Report, source: str | None,
                 counter: verify.SessionCounter, step) -> None:
        self.model, self.settings, self.report, self.source, self.counter, self.step = model, settings, report, source, counter, step
        self.chosen: list[dict[str, np.ndarray]] | None = None
        self.decisions_added = False

    def get(self, decided: tuple = ([], {})) -> list[dict[str, np.ndarray]]:
        """The feeds (searched once); with decisions (graphfix.discrete), at least two input sets:
        near-ties show at more than one input."""
        if self.chosen is None:
            self.step("choosing verification inputs")
            self.chosen = _feeds(self.model, self.settings, self.report, self.source, self.counter)
        if decided[1] and len(self.chosen) < 2 and not self.settings.feeds and not self.decisions_added:
            self.decisions_added = True
            shapes = {k: tuple(v) for k, v in self.report.shapes["shapes"][0].items()}
            self.chosen = self.chosen + verify.make_inputs(self.model, shapes, self.settings.val_range, self.settings.seed + 1, 1)
        return self.chosen

    def unused(self) -> None:
        """Nothing was rewritten: no feeds, no session; the report says why."""
        if self.chosen is None:
            self.report.verification = "none needed: nothing was rewritten (no onnxruntime session)"
            if not self.report.shapes and not self.settings.feeds:
                self.report.shapes = _unrun_shapes(self.model, self.settings, self.source)


def _unrun_shapes(model: onnx.ModelProto, settings: Settings, source: str | None) -> dict[str, Any]:
    """The report's shapes when nothing was verified: the given ones, else the first candidates
    the shape search would try, not run (the printed TensorRT profile needs shapes for dynamic
    inputs; graphfix did not run the model there)."""
    why = "not needed: nothing was rewritten, so nothing was verified (no onnxruntime session)"
    try:
        choice = shapes_mod.choose(model, settings.input_shapes, lambda shapes: None, source)
    except GraphfixError:
        return {"reason": why, "shapes": []}
    shapes = [s for s in choice.shapes if s]
    if shapes:
        why += f"; the shapes below, for the printed TensorRT profile only, were not run ({choice.reason})"
    return {"reason": why, "shapes": [{k: list(v) for k, v in s.items()} for s in shapes]}


def _feeds(model: onnx.ModelProto, settings: Settings, report: Report, source: str | None,
           counter: verify.SessionCounter) -> list[dict[str, np.ndarray]]:
    if settings.feeds:
        report.shapes = {"reason": "loaded with --load-inputs", "shapes": []}
        return settings.feeds
    session, defaults_tried = None, False

    def attempt(feed: dict) -> list:
        nonlocal session
        if session is None:
            session = verify.session(model, settings.base_dir, counter.tuned)
            report.search_sessions += 1
        return session.run(None, feed)

    def runs(shapes: dict) -> str | None:
        nonlocal session, defaults_tried
        try:
            feed = verify.make_inputs(model, shapes, settings.val_range, settings.seed, 1)[0]
            try:
                first = attempt(feed)
            except GraphfixError:
                raise
            except Exception:  # noqa: BLE001 - once, onnxruntime's defaults (verify.run says why)
                if not counter.tuned or defaults_tried:
                    raise
                session, counter.tuned, defaults_tried = None, False, True
                try:
                    first = attempt(feed)
                except Exception:
                    session, counter.tuned = None, True
                    raise
            if settings.input_shapes:
                return None  # the user's shapes: used as given
            return verify.unusable(first, attempt(feed), [o.name for o in model.graph.output])
        except GraphfixError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types
            return first_line(exc)

    choice = shapes_mod.choose(model, settings.input_shapes, runs, source, settings.max_memory)
    for extra in settings.profile_shapes:
        full = {**choice.shapes[0], **extra}
        if full in choice.shapes:
            continue
        try:
            error = runs(full)
        except GraphfixError as exc:
            error = str(exc)
        if error is None:
            choice.shapes.append(full)
        else:
            report.notes.append(f"profile shapes {shapes_mod.describe(full)} not verified: onnxruntime cannot run them ({error})")
    report.shapes = {"reason": choice.reason, "tried": choice.tried,
                     "shapes": [{k: list(v) for k, v in s.items()} for s in choice.shapes]}
    feeds = []
    for s in choice.shapes:
        feeds += verify.make_inputs(model, s, settings.val_range, settings.seed, settings.iterations)
    return feeds


def _verify_regions(model, graph, log, settings, report, feeds, counter, source, decided=([], {}), step=lambda what: None):
    """Probe session + end-to-end session. Returns (baseline, final, fell_back, the fixed model).
    ``decided``: the original's decisions and the outputs depending on them (graphfix.discrete).
    ``step`` hears each phase and, every 1/100 of them, how many regions were compared (a
    100k-node run spends tens of seconds here)."""
    originals = regions_mod.original_names(model)
    regs = regions_mod.regions(log.edits, graph, originals)
    step(f"verification probe run on onnxruntime ({len(regs)} regions)")
    decisions, depends = decided if decided[1] else ([], {})
    probe = regions_mod.probe_model(model, regs, discrete.exposed(decisions))
    try:
        probe_results = verify.run(probe, feeds, "graphfix-probe", counter, settings.base_dir)
    except Exception as exc:  # noqa: BLE001
        try:
            verify.run(model, feeds, "original", counter, settings.base_dir)
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
        records = verify.region_diffs(probe_results, r.probes, *settings.tol, settings.automatic_tolerance) if not r.unchecked else {}
        bad = {k: d for k, d in records.items() if not d.passed}
        worst = ", ".join(f"{k} (max abs {d.max_abs:.3g}, max rel {d.max_rel:.3g})" for k, d in bad.items())
        entry = _node_record(r, ROLLED_BACK if bad else KEPT, r.unchecked or "on its own, on the original model's tensors",
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
            _charge_rollback(by_pass, r, f"{', '.join(entry['nodes'])}: outputs differ: {worst}", settle=False)
    for rec in report.passes:
        if rec.verdict == UNVERIFIED:
            rec.verdict = ROLLED_BACK if rec.rolled_back_nodes >= rec.rewritten else KEPT
    baseline = verify.select_outputs(probe_results, [o.name for o in model.graph.output])
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
        final = verify.run(_exposing(fixed, discrete.exposed(decisions)), feeds, "graphfix-fixed", counter, settings.base_dir)
    except Exception as exc:  # noqa: BLE001
        report.notes.append(f"onnxruntime cannot run the fixed model ({first_line(exc)}); checking pass by pass")
        return baseline, None, True, None
    if decisions:
        report.discrete = discrete.judge(decisions, depends, verify.iterations(probe_results), verify.iterations(final))
        final = verify.select_outputs(final, [o.name for o in model.graph.output])
    diffs = _end_to_end(model, baseline, final, settings, feeds, counter, report)
    report.final = {k: d.as_dict() for k, d in diffs.items()}
    if not all(d.passed for d in diffs.values()):
        return baseline, None, True, None
    entries = dict(zip(map(id, regs), report.nodes[first_entry:], strict=True))
    return _users_settings(model, graph, log, regs, entries, parts, settings, report, feeds, counter, baseline, final, step)


def _users_settings(model, graph, log, regs, entries, parts, settings: Settings, report: Report, feeds, counter,
                    baseline, final, step):
    """The written model against the original once more, under the settings users run
    (onnxruntime's defaults, graph optimizations on: polygraphy's onnxrt runner, a plain
    InferenceSession). Verification's sessions switch the optimizer off, and an optimizer rule can
    read a rewrite otherwise: DivMulFusion turned an integer ``Div(1, x)`` feeding a ``Mul`` into
    ``Div(y, x)`` (issue 22: a Swin export off by 0.2, exact in graphfix's own sessions). Two
    sessions: the original's run doubles as the noise floor's (verify.switched_run). A difference
    under these settings only is blamed on the regions that differ in the probe run under them,
    which are undone and named. Returns _verify_regions' tuple with the results under the users'
    settings: the reference outputs written for polygraphy come from the configuration it runs."""
    if not counter.tuned or not verify.on_onnxruntime(model):
        report.users = {"settings": "verification's own (onnxruntime's defaults, or not onnxruntime): nothing to add",
                        "outputs": {}}
        return baseline, final, False, parts
    step("end-to-end run under onnxruntime's default settings")
    try:
        reference = verify.first_iterations(verify.switched_run(model, feeds, counter, settings.base_dir), len(feeds))
    except GraphfixError:
        raise
    except Exception as exc:  # noqa: BLE001 - an optimizer that fails on the input itself: nothing to compare with
        report.users = {"settings": verify.USERS_SETTINGS, "outputs": {}, "skipped": first_line(exc)}
        report.notes.append(f"onnxruntime cannot run the input model under {verify.USERS_SETTINGS} ({first_line(exc)}): "
                            "the written model was compared under verification's settings only")
        return baseline, final, False, parts
    diffs, results = _users_diffs(model, reference, parts, settings, report, feeds, counter)
    report.users = {"settings": verify.USERS_SETTINGS, "outputs": {k: d.as_dict() for k, d in diffs.items()}}
    if all(d.passed for d in diffs.values()):
        return reference, results, False, parts
    worst = ", ".join(f"{k} (max abs {d.max_abs:.3g}{'; ' + d.note if d.note else ''})" for k, d in diffs.items() if not d.passed)
    report.notes.append(f"the fixed model agreed with the original in verification's sessions (graph optimizations off) "
                        f"but not under {verify.USERS_SETTINGS}: {worst}; the regions that differ there are undone")
    undone = _undo_under_users_settings(model, regs, entries, settings, report, feeds, counter, step)
    report.users["rolled_back"] = undone
    if not any(not e.undone for e in log.edits):
        return reference, reference, False, model
    parts = to_parts(graph, model)
    fixed = parts.proto() if isinstance(parts, Assembled) else parts
    step("end-to-end run of the fixed model (again)")
    try:
        final = verify.run(fixed, feeds, "graphfix-fixed", counter, settings.base_dir)
    except Exception as exc:  # noqa: BLE001
        report.notes.append(f"onnxruntime cannot run the fixed model ({first_line(exc)}); checking pass by pass")
        return baseline, None, True, None
    report.final = {k: d.as_dict() for k, d in _end_to_end(model, baseline, final, settings, feeds, counter, report).items()}
    diffs, results = _users_diffs(model, reference, fixed, settings, report, feeds, counter)
    report.users["outputs"] = {k: d.as_dict() for k, d in diffs.items()}
    if not all(d["passed"] for d in [*report.final.values(), *report.users["outputs"].values()]):
        return baseline, None, True, None
    return reference, results, False, parts


def _users_diffs(model, reference, fixed, settings: Settings, report: Report, feeds, counter):
    """The fixed model under the users' settings against ``reference`` (the original's run there):
    (per-output differences, its results). A fixed model those settings cannot run differs on
    every output (results None)."""
    try:
        results = verify.users_run(fixed, feeds, "graphfix-fixed", counter, settings.base_dir)
    except GraphfixError:
        raise
    except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types
        why = f"onnxruntime cannot run it there ({first_line(exc)})"
        return {o.name: verify.OutputDiff(float("inf"), float("inf"), False, why) for o in model.graph.output}, None
    diffs = _end_to_end(model, reference, results, settings, feeds, counter, report)
    _ties_in_another_order(diffs, reference, results, settings, report)
    return diffs, results


def _ties_in_another_order(diffs: dict[str, verify.OutputDiff], reference, results, settings: Settings, report: Report) -> None:
    """Under the users' settings, an output that depends on a TopK/ArgMax/comparison (found by
    graphfix.discrete) can come out with near-tied elements in another order: onnxruntime's
    optimizer changes the rounding that breaks the tie, in the original as in the fixed model (an
    NMS-free YOLO head, TopK 300 of 8400: the untouched original, default settings vs optimizations
    off, max abs 164, sorted scores equal to 1.2e-7). The rewrites were judged exactly in
    verification's own sessions; here such an output passes when its sorted values agree, with a
    note that says why, and the report says how to compare it with another runtime."""
    depends = (report.discrete or {}).get("outputs", {})
    failing = [k for k, d in diffs.items() if not d.passed and k in depends]
    if not failing:
        return
    ordered = verify.sorted_diffs(reference, results, failing, *settings.tol, report.noise_floor)
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
        ran = verify.users_run(regions_mod.probe_model(model, live), feeds, "graphfix-probe", counter, settings.base_dir)
    except GraphfixError:
        raise
    except Exception:  # noqa: BLE001 - no region can be singled out: every live one is undone
        ran = None
    blamed = {}
    for r in live:
        if r.unchecked or ran is None:
            continue
        bad = {k: d for k, d in verify.region_diffs(ran, r.probes, *settings.tol, settings.automatic_tolerance).items()
               if not d.passed}
        if bad:
            blamed[id(r)] = ", ".join(f"{k} (max abs {d.max_abs:.3g})" for k, d in bad.items())
    whole = "the whole fixed model differs there and no single region does"
    by_pass = {rec.name: rec for rec in report.passes}
    for r in live:
        if blamed and id(r) not in blamed:
            continue
        why = f"differs only under {verify.USERS_SETTINGS}: {blamed.get(id(r), whole)}"
        if settings.strict:
            raise StrictFailure(f"--strict: {', '.join(f'{e.node.op} {e.node.name!r}' for e in r.edits)} ({', '.join(r.passes)}) "
                                f"would be rolled back: it {why}")
        entry = entries.get(id(r))
        if entry is not None:
            entry.update(verdict=ROLLED_BACK, reason=why)
        r.undo()
        _charge_rollback(by_pass, r, why)
    return len(blamed) or len(live)


def _verify_each(model, graph, chosen, settings, report, feeds, counter, log, start, step, before=None) -> Outcome:
    """Whole-pass checking (debugging, fallback): one session for the input plus one per changed
    pass, and as many again under the settings users run (a pass kept only when it agrees under
    both: see _users_settings)."""
    if not report.verification:
        report.verification = "pass by pass (--verify-each)"
    state: dict[str, Any] = {"results": None, "users": None}
    users = counter.tuned and verify.on_onnxruntime(model)

    def users_check(candidate) -> str:
        """Why ``candidate`` differs under the users' settings only ("" when it does not)."""
        if state["users"] is None:
            state["users_ref"] = verify.first_iterations(verify.switched_run(model, state["feeds"], counter, settings.base_dir),
                                                         len(state["feeds"]))
        diffs, state["users"] = _users_diffs(model, state["users_ref"], candidate, settings, report, state["feeds"], counter)
        report.users = {"settings": verify.USERS_SETTINGS, "outputs": {k: d.as_dict() for k, d in diffs.items()}}
        bad = [f"{k} (max abs {d.max_abs:.3g}{'; ' + d.note if d.note else ''})" for k, d in diffs.items() if not d.passed]
        return f"differs only under {verify.USERS_SETTINGS}: {', '.join(bad)}" if bad else ""

    def reference() -> Any:
        """The original's outputs, run when the first pass changed something (feeds chosen then;
        the checker's depth too: it asks onnxruntime which IR version it loads)."""
        if state["results"] is None:
            step("original model on onnxruntime")
            state["full_check"] = passes_full_check(model)
            state["feeds"] = feeds.get()
            state["baseline"] = state["results"] = verify.run(model, state["feeds"], "original", counter, settings.base_dir)
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
                results = verify.run(candidate, feeds_now, record.name, counter, settings.base_dir)
            except Exception as exc:  # noqa: BLE001
                reason = f"onnxruntime cannot run the rewritten model ({first_line(exc)})"
        if results is not None:
            diffs = _end_to_end(model, baseline, results, settings, feeds_now, counter, report)
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

    if _run_passes(graph, chosen, settings, log, report, step, after_pass=check):  # regions undone after checking
        fixed = to_model(graph, model)
        baseline = reference()
        state["results"] = verify.run(fixed, state["feeds"], "graphfix-fixed", counter, settings.base_dir)
        diffs = _end_to_end(model, baseline, state["results"], settings, state["feeds"], counter, report)
        report.final = {k: d.as_dict() for k, d in diffs.items()}
        if users and state["users"] is not None:
            users_check(fixed)
    fixed = to_model(graph, model) if any(not e.undone for e in log.edits) else model
    if "baseline" not in state:
        feeds.unused()
    report.sessions = counter.count
    if settings.trt is not None:
        report.trt = _trt_summary(before or _check(model, settings.trt), _check(fixed, settings.trt), settings.trt)
    report.seconds = round(time.perf_counter() - start, 4)
    if state["users"] is not None:  # the polygraphy side files: the results under the users' settings
        return Outcome(fixed, report, state["feeds"], state["users_ref"], state["users"])
    return Outcome(fixed, report, state.get("feeds", []), state.get("baseline"), state["results"])


def _end_to_end(model, baseline, results, settings: Settings, feeds, counter, report: Report) -> dict[str, verify.OutputDiff]:
    """The fixed (or partly fixed) model's outputs against the original's: at the tolerance in
    force, and with the automatic tolerance, where that fails, within NOISE_MULTIPLE times the
    original model's own noise floor (measured once per run, reported as ``noise_floor``)."""
    diffs = verify.compare(baseline, results, *settings.tol)
    if not all(d.passed for d in diffs.values()) and settings.automatic_tolerance:
        if report.noise_floor is None:
            report.noise_floor = verify.noise_floor(model, feeds, baseline, counter, settings.base_dir)
        diffs = verify.compare(baseline, results, *settings.tol, report.noise_floor)
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


def _invalid(model: onnx.ModelProto, full_check: bool, source: onnx.ModelProto | None = None,
             report: Report | None = None) -> str | None:
    """onnx.checker's complaint about a rewritten ``model``. With ``source`` (the input), a full
    check's shape conflict that vanishes once the input's own declared shapes are forgotten is the
    input's defect, not the rewrite's (model_io.relaxed_problem); the report says so once."""
    try:
        problem = checker_problem(runtime_compatible(model), full_check)
    except GraphfixError as exc:
        return str(exc)
    if problem and full_check and source is not None and "ShapeInferenceError" in problem:
        relaxed = relaxed_problem(model, _declared(source))
        note = f"the input declares shapes it does not compute ({problem}); no rewrite is rolled back for it"
        if relaxed is None and report is not None and note not in report.notes:
            report.notes.append(note)
        return relaxed
    return problem


def _declared(source: onnx.ModelProto) -> frozenset[str]:
    """The input's declared tensors, measured once per input model."""
    cached = _DECLARED.get(id(source))
    if cached is None or cached[0] is not source:
        _DECLARED.clear()
        cached = _DECLARED[id(source)] = (source, declared_shapes(source))
    return cached[1]


_DECLARED: dict[int, tuple[onnx.ModelProto, frozenset[str]]] = {}


def _check(model: onnx.ModelProto, trt: str | None):
    """`graphfix check` of ``model`` for ``trt`` (None without a target)."""
    if trt is None:
        return None
    from graphfix.trt.check import check_model

    return check_model(model, trt)


def _check_fixed(graph: gs.Graph, fixed: Assembled, trt: str):
    """`graphfix check` of the fixed model on the graph it was exported from (pruned and sorted
    by the export): no second import, and the weights are not copied into one ModelProto."""
    from graphfix.trt.check import check_graph

    return check_graph(graph, trt, default_opset(fixed.stub), {t.data_type for t in fixed.initializers})


def _trt_summary(before, after, trt: str) -> dict[str, Any]:
    """`graphfix check` before (the input's report) and after: what the target still rejects."""
    return {"version": trt, "before": before.as_dict(), "after": after.as_dict()}
