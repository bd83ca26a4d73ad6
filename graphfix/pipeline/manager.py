"""The pass manager: choose the passes, run them in rounds until nothing changes, undo a rewrite
that leaves a new blocker for the target release.
"""

from __future__ import annotations

import time
from collections import Counter
from itertools import islice
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from graphfix import passes as registry
from graphfix.analysis.fold import Folder
from graphfix.check.findings import BLOCKING, check_model, check_nodes, passes_for
from graphfix.errors import GraphfixError, first_line
from graphfix.graph import Builder
from graphfix.graph.edits import EditLog, drop_op_index, index_ops, live_nodes, nodes_of
from graphfix.graph.importer import all_graphs
from graphfix.onnxio.collector import collector_off
from graphfix.passes.base import Context, Pass
from graphfix.pipeline.settings import Settings, StrictFailure
from graphfix.report import diagram as diagram_mod
from graphfix.report.model import ERROR, ROLLED_BACK, UNCHANGED, UNVERIFIED, PassRecord, Report
from graphfix.trt.versions import TrtVersion
from graphfix.verify import regions as regions_mod


def trt_version(text: str | None) -> TrtVersion | None:
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

        wanted = passes_for(before or check_model(model, settings.trt))
        return [p for p in registry.select("all", settings.skip) if p.name in wanted]
    if not isinstance(names, str) and any(isinstance(n, Pass) for n in names):
        custom = [n if isinstance(n, Pass) else registry.get(n) for n in names]
        inexact = [p.name for p in custom if not p.exact]
        if inexact:  # the pipeline's verification would undo it; graphfix's own run through their options
            raise GraphfixError(f"pass {inexact[0]} is not exact (Pass.exact False) and cannot run in a pass list; "
                                "graphfix's opt-in rewrites run through their own options (--requantize-symmetric, "
                                "--dequantize-dynamic)")
        return [p for p in custom if p.name not in settings.skip]  # your own list runs as given
    return registry.select(names, settings.skip)


def _auto(settings: Settings) -> bool:
    names = settings.passes
    return (isinstance(names, str) and names.strip() == "auto") or list(names) == ["auto"]


# ---------------------------------------------------------------------- passes on one graph
#: The inputs/outputs (names, dtypes, shapes) of the main graph, and of each If/Loop/Scan body by id.
Signature = tuple[list[tuple], dict[int, tuple[gs.Graph, list[tuple]]]]


def _ends(graph: gs.Graph) -> list[tuple]:
    return [(t.name, str(t.dtype), tuple(t.shape) if t.shape is not None else None) for t in [*graph.inputs, *graph.outputs]]


def _signature(graph: gs.Graph) -> Signature:
    return _ends(graph), {id(g): (g, _ends(g)) for g in islice(all_graphs(graph), 1, None)}


def _changed_ends(graph: gs.Graph, signature: Signature) -> str:
    """Which graph's inputs/outputs a pass changed: the main graph's, or a body's that is still
    there (if-inline removes bodies, and the copies it inlines are new)."""
    if _ends(graph) != signature[0]:
        return "graph inputs/outputs changed (names, dtypes or shapes)"
    for g in islice(all_graphs(graph), 1, None):
        before = signature[1].get(id(g))
        if before is not None and before[0] is g and not _refines(_ends(g), before[1]):
            return f"the inputs/outputs of body '{g.name}' changed (names, dtypes or shapes)"
    return ""


def _refines(after: list[tuple], before: list[tuple]) -> bool:
    """A body's ends are the same, or only typed where they were not: inlining an If inside a body
    (TorchScript's `input.dim()` tests) makes its ops produce the body's output, and the ops' own
    inference gives the output a dtype and shape the exporter left out. The enclosing node's
    outputs are unchanged by it, so the contract holds; a name, or a known dtype or shape, that
    changes still breaks it."""
    if len(after) != len(before):
        return False
    return all(a[0] == b[0] and b[1] in (a[1], "None") and b[2] in (a[2], None)
               for a, b in zip(after, before, strict=True))


def _ensure(p: Pass, graph: gs.Graph, trt: TrtVersion | None, force: bool, skipped: set[str], signature: Signature) -> str:
    """The pass's post-condition: what is still wrong, or ""."""
    changed = _changed_ends(graph, signature)
    if changed:
        return changed
    for g in all_graphs(graph):
        g.opset = graph.opset
        ctx = Context(g, Builder(g, "ensure"), Folder(g), None if force else trt, force)
        left = [n for n in nodes_of(g, p.ops) if (n.name or n.op) not in skipped and p.match(n, ctx)]
        if left:  # replaced nodes stay in g.nodes until export: only live ones count
            live = live_nodes(g)
            left = [n for n in left if id(n) in live]
        if left:
            return f"{len(left)} node(s) it matches are left unreported, e.g. {left[0].op} '{left[0].name}'"
    return ""


def op_counts(graph: gs.Graph) -> Counter:
    """How many nodes of each op type the graph and its bodies hold (a pass whose ops are absent is
    skipped without a scan; counts only grow, as replaced nodes stay until cleanup). Counted from
    each graph's :func:`index_ops`, which the passes before the first edit then read their nodes
    from (run_passes drops it at its end)."""
    counts: Counter = Counter()
    for g in all_graphs(graph):
        counts.update({op: len(nodes) for op, nodes in index_ops(g).items()})
    return counts


#: Rounds of the pass list at most: a pass may emit what an earlier pass rewrites (cumsum-decompose's
#: integer Mod after mod-decompose ran), so the list runs again on what the last round added.
MAX_ROUNDS = 4


def run_passes(graph: gs.Graph, chosen: list[Pass], settings: Settings, log: EditLog, report: Report,
                step, after_pass=None) -> int:
    """The passes in order, then again on what they added, until a round rewrites nothing: running
    graphfix on its own output then changes nothing. With ``--passes auto`` the later rounds may
    use any pass (what a rewrite emits can need one the input did not).

    No collection runs while a pass rewrites or its contract is checked, and what it made is
    frozen after it (``collector_off(freeze=True)``), as the import's objects are: 360 collections,
    2 of them full, scanned them only to find them alive (0.14 s of the passes' 1.3 s on
    bench/scale.py), and every later collection scanned them again. Reference cycles a pass drops
    are frozen too, freed at the run's end instead of sooner (a young collection before freezing
    found none there and cost 60 ms; verified runs kept their peak memory). The caller
    unfreezes, as it does for a frozen import (pipeline.run, at the end of the run)."""
    trt = trt_version(settings.trt)
    signature = _signature(graph)
    counts = op_counts(graph)
    records: dict[str, PassRecord] = {}
    todo = chosen
    try:
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
    finally:  # an export sorts the nodes without an edit: the index holds for this run only
        for g in all_graphs(graph):
            drop_op_index(g)
    later = {"--requantize-symmetric"} if settings.requantize_symmetric else set()
    return _undo_new_blockers(graph, log, report, settings.trt, later) if trt is not None else 0


def _undo_new_blockers(graph: gs.Graph, log: EditLog, report: Report, trt: str, later: set[str] = frozenset()) -> int:
    """A rewrite may not leave a node the target rejects (reduce-axes-input's TopK on INT64 before
    8.6, a Pad with computed pads before 8.0): the region that added it is undone, with the reason.
    ``later``: the opt-in steps the user asked for that run after the passes; what they clear is
    not held against a rewrite (qoperator-to-qdq's asymmetric Q/DQ, which --requantize-symmetric
    makes symmetric; should that step be rolled back, the final check still says what blocks).
    Returns how many regions were undone."""

    live = set().union(*(live_nodes(g) for g in all_graphs(graph)))
    added = {id(n): (e, n) for e in log.edits if not e.undone for n in e.added if id(n) in live}
    if not added:
        return 0
    findings = check_nodes(graph, [(e.graph, n) for e, n in added.values()], trt)
    by_name = {n.name: e for e, n in added.values()}
    blamed = {}
    for f in findings:
        if f.severity == BLOCKING and f.node in by_name and f.opt_in not in later:
            blamed.setdefault(id(by_name[f.node]), f)
    if not blamed:
        return 0
    by_pass = {r.name: r for r in report.passes}
    undone = 0
    for region in regions_mod.regions(log.edits, graph, set()):
        f = next((blamed[id(e)] for e in region.edits if id(e) in blamed), None)
        if f is None:
            continue
        report.nodes.append(node_record(region, ROLLED_BACK, "not compared (undone before verification)",
                                         f"emits {f.op} {f.node!r}, which TensorRT {trt} rejects ({f.message})"))
        region.undo()
        undone += 1
        why = f"{', '.join(f'{e.node.op} {e.node.name!r}' for e in region.edits)}: emits {f.op} {f.node!r}, which TensorRT {trt} rejects ({f.message})"
        charge_rollback(by_pass, region, why)
    return undone


def charge_rollback(by_pass: dict[str, PassRecord], region: regions_mod.Region, why: str, settle: bool = True) -> None:
    """An undone region's passes: its nodes counted as rolled back and ``why`` added to their
    reason; with ``settle``, a pass whose every rewrite is undone is marked rolled back."""
    for name in region.passes:
        rec = by_pass[name]
        rec.rolled_back_nodes += sum(e.pass_name == name for e in region.edits)
        rec.reason = (rec.reason + "; " if rec.reason else "rolled back: ") + why
        if settle and rec.rolled_back_nodes >= rec.rewritten:
            rec.verdict = ROLLED_BACK


def node_record(region: regions_mod.Region, verdict: str, checked: str, reason: str = "", outputs=None) -> dict[str, Any]:
    """The report's record of one rewritten region: its passes, the nodes it replaced (op and
    name), what was compared, the verdict, why it was undone, its before/after diagram and cost
    (FLOPs and bytes before/after; both read before any undo: they read the live rewrite)."""
    record = {"passes": region.passes, "nodes": [f"{e.node.op} '{e.node.name}'" for e in region.edits],
              "outputs": outputs or {}, "verdict": verdict, "checked": checked, "diagram": diagram_mod.diagram(region),
              "cost": regions_mod.cost(region)}
    if reason:
        record["reason"] = reason
    return record


def _run_pass(p: Pass, graph: gs.Graph, record: PassRecord, settings: Settings, trt: TrtVersion | None,
              signature: Signature, counts: Counter, log: EditLog, step, after_pass) -> None:
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
        with collector_off(freeze=True):
            matched, rewritten, findings = p.run_on_graph(graph, trt, force, log)
    except GraphfixError:
        raise
    except Exception as exc:  # noqa: BLE001 - a buggy pass must not take the user's run down
        log.rollback_to(mark)
        verdict, record.reason = ERROR, f"rolled back: the pass raised {type(exc).__name__}: {first_line(exc)}"
    else:
        record.matched += matched
        record.rewritten += rewritten
        known = {(f["node"], f["message"]) for f in record.findings}
        record.findings += [d for d in (f.as_dict() for f in findings) if (d["node"], d["message"]) not in known]
        with collector_off(freeze=True):
            broken = _ensure(p, graph, trt, force, {f.node or f.op for f in findings}, signature) if rewritten else ""
        if broken:
            log.rollback_to(mark)
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
