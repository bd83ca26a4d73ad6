"""The terminal summary, and the grouping every format shares (findings and rewrites grouped).
"""

from __future__ import annotations

from typing import Any

from graphfix.check.findings import data_source_lines, finding_groups, from_data
from graphfix.errors import cut, visible
from graphfix.report.model import KEPT, Report
from graphfix.report.text import DIAGRAMS_PER_KIND, MAX_DIAGRAMS, MAX_NAME, MAX_TEXT, md_code, md_text
from graphfix.verify.compare import NOISE_MULTIPLE


# ---------------------------------------------------------------------- text
def _num(x: float) -> str:
    return "0" if x == 0 else f"{x:.2e}"


def table(report: Report) -> str:
    """The per-pass table printed after a run."""
    head = ["pass", "matched", "rewritten", "nodes", "max abs", "max rel", "worst output", "verdict", "time"]
    rows: list[list[str]] = []
    for p in report.passes:
        delta = p.nodes_after - p.nodes_before
        worst = p.worst
        rows.append([
            p.name, str(p.matched), str(p.rewritten),
            f"{p.nodes_before}->{p.nodes_after} ({delta:+d})" if p.rewritten else "-",
            _num(worst[1]) if worst else "-", _num(worst[2]) if worst else "-",
            (worst[0] + (f" (of {len(p.outputs)})" if len(p.outputs) > 1 else "")) if worst else "-",
            p.verdict, f"{p.seconds:.2f}s",
        ])
        for out, d in p.outputs.items():  # every mismatching output gets its own line
            if not d["passed"]:
                rows.append(["", "", "", "", _num(d["max_abs"]), _num(d["max_rel"]), out, "MISMATCH", ""])
    rows = [[visible(cut(c, MAX_NAME)) for c in r] for r in rows]  # names are free text: no escape sequence reaches the terminal
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i in (0, 6, 7) else '>'}{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    notes = []
    for p in report.passes:
        if p.reason:
            notes.append(f"{p.name}: {p.reason}")
        notes += [f"{p.name}: {f['op']} '{f['node']}' not rewritten: {f['message']}{in_parens(like)}" for f, like in grouped(p.findings)]
    if report.noise_floor:
        worst = max(report.final, key=lambda k: report.final[k]["max_abs"], default=None)
        if worst is not None:
            d = report.final[worst]
            notes.append(f"end to end: {worst} differs by {_num(d['max_abs'])}; the original model's own noise floor there is "
                         f"{_num(report.noise_floor.get(worst, 0.0))} (accepted up to {NOISE_MULTIPLE}x; --atol/--rtol make it exact)")
    widened = sorted({d["precision"] for d in report.final.values() if d.get("precision")})
    if widened:
        outputs = [k for k, d in report.final.items() if d.get("precision")]
        notes.append(f"end to end: {', '.join(outputs[:3])}{' ...' if len(outputs) > 3 else ''} computed in {'/'.join(widened)}: "
                     "compared at 4 units in that type's last place (docs/verification.md)")
    notes += discrete_lines(report.discrete)
    if report.notes:
        notes += report.notes
    if notes:
        lines += ["", *(visible(cut(n, 4 * MAX_TEXT)) for n in notes)]
    verified = "verification off" if not report.settings.get("verify", True) else f"{report.sessions} onnxruntime session(s)"
    lines += ["", f"{len(report.passes)} pass(es), {verified}, {report.seconds:.2f}s; status: {report.status}"]
    return "\n".join(lines)


def users_lines(users: dict[str, Any]) -> list[str]:
    """The end-to-end comparison under the settings users run, as markdown bullets."""
    outputs = users.get("outputs") or {}
    if not outputs:
        return []
    bad = [k for k, d in outputs.items() if not d["passed"]]
    worst = max(outputs, key=lambda k: outputs[k]["max_abs"] if isinstance(outputs[k]["max_abs"], float) else float("inf"))
    verdict = f"differs: {', '.join(md_code(k, cell=False) for k in bad[:NAMED])}" if bad else "agrees"
    lines = [f"- under {md_text(users['settings'])}: {verdict} (worst {md_code(worst, cell=False)} max abs {_num(outputs[worst]['max_abs'])})"]
    if users.get("rolled_back"):
        lines.append(f"  - {users['rolled_back']} region(s) undone for a difference there only")
    return lines


def discrete_lines(record: dict[str, Any] | None) -> list[str]:
    """Outputs that depend on ArgMax/TopK/comparison decisions: closest margins and flips."""
    if not record:
        return []
    decisions = record["decisions"]
    closest = min((r["min_margin"] for r in decisions.values()), default=float("inf"))
    lines = [f"discrete outputs {', '.join(record['outputs'])} depend on {len(decisions)} decision(s); "
             f"closest margin {_num(closest)} over {record['inputs']} input(s)"]
    for node, r in decisions.items():
        if r["flipped"]:
            kind = "near-ties, kept" if r["near_ties"] else "NOT near-ties"
            lines.append(f"  {r['op']} '{node}' flipped {r['flipped']} element(s) at margins "
                         f"{', '.join(_num(m) for m in r['margins_at_flips'])} (inputs moved {_num(r['moved'])}: {kind})")
    return lines


#: Nodes named after the first when the same finding repeats.
NAMED = 5


def group_by(items: list[dict], key: tuple[str, ...]) -> list[list[dict]]:
    """Items with equal values under ``key`` together, in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for f in items:
        groups.setdefault(tuple(f.get(k) for k in key), []).append(f)
    return list(groups.values())


def grouped(findings: list[dict], key: tuple[str, ...] = ("op", "message")) -> list[tuple[dict, str]]:
    """Each distinct finding once, with "and N more like it: ..." naming the other nodes (empty
    when there are none): an export repeats its blocks, and 25000 identical lines hide the one
    that differs."""
    return [(same[0], more_like(same)) for same in group_by(findings, key)]


def more_like(same: list[dict], show=str) -> str:
    """"and N more like it: a, b, …"; ``show`` writes one node name (Markdown: as a code span)."""
    others = [g.get("node") or "(model)" for g in same[1:]]
    named = ", ".join(show(o) for o in others[:NAMED]) + (f", … ({len(others) - NAMED} more)" if len(others) > NAMED else "")
    return f"and {len(others)} more like it: {named}" if others else ""


def in_parens(like: str) -> str:
    return f" ({like})" if like else ""


#: The columns of the per-pass cost table (Markdown and HTML).
COST_HEAD = ["passes", "kept regions", "FLOPs before → after", "bytes before → after", "nodes of unknown size"]


def pass_costs(report: Report) -> list[tuple[str, int, dict[str, int]]]:
    """Each pass's kept regions' cost, summed (a region rewritten by several passes counts under
    their joined names): (passes, regions, totals as in a region record's ``cost``). What the
    written model pays for each pass, before deploying it."""
    totals: dict[str, tuple[int, dict[str, int]]] = {}
    for r in report.nodes:
        if r.get("verdict") != KEPT or not r.get("cost"):
            continue
        key = ", ".join(r["passes"])
        count, sums = totals.get(key, (0, {}))
        totals[key] = (count + 1, {k: sums.get(k, 0) + v for k, v in r["cost"].items()})
    return [(k, n, sums) for k, (n, sums) in totals.items()]


def _amount(n: float) -> str:
    """12, 4.1k, 3.2M, 1.5G: the cost table's numbers."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def cost_cells(sums: dict[str, int]) -> list[str]:
    """The FLOPs and bytes cells of a cost row: before → after (after/before)."""
    cells = []
    for what in ("flops", "bytes"):
        before, after = sums[f"{what}_before"], sums[f"{what}_after"]
        ratio = f" ({after / before:.3g}x)" if before else ""
        cells.append(f"{_amount(before)} → {_amount(after)}{ratio}")
    return cells


def rewrite_groups(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Node records of identical rewrites together (same passes, same replaced ops, same
    verdict), rolled-back groups first: an export repeats its blocks, and the 25000 copies of
    one rewrite are one row."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        ops = tuple(n.split(" ", 1)[0] for n in r["nodes"])
        groups.setdefault((tuple(r["passes"]), ops, r["verdict"]), []).append(r)
    return sorted(groups.values(), key=lambda g: g[0]["verdict"] == KEPT)


def _worst_diff(records: list[dict[str, Any]]) -> str:
    diffs = [(d["max_abs"], k) for r in records for k, d in r["outputs"].items()]
    if not diffs:
        return "-"
    value, name = max(diffs, key=lambda d: d[0])  # the first of equals
    return f"{_num(value)} ({md_code(name)})"


def _drawn(groups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """At most MAX_DIAGRAMS records to draw: each group's first, then each group's second, ...
    up to DIAGRAMS_PER_KIND (a small run draws every region, a large one each kind of rewrite)."""
    picked: list[dict[str, Any]] = []
    depth = 0
    while len(picked) < MAX_DIAGRAMS and depth < DIAGRAMS_PER_KIND and any(depth < len(g) for g in groups):
        picked += [g[depth] for g in groups if depth < len(g)][:MAX_DIAGRAMS - len(picked)]
        depth += 1
    return picked


def trt_groups(findings: list[dict[str, Any]]) -> list[tuple[list[dict[str, Any]], list[str] | None]]:
    """TensorRT findings as the reports group them: the same finding on many nodes together, and
    the shape tensors computed from one data source as one group (graphfix.check.findings.finding_groups),
    each such group with its headline and "read by …" and "path: …" lines (None for the others)."""

    out: list[tuple[list[dict[str, Any]], list[str] | None]] = []
    for same in finding_groups(findings):
        if from_data(same[0]):
            head, lines = data_source_lines(same, "")
            out.append((same, [head, *lines[:2]]))
        else:
            out.append((same, None))
    return out
