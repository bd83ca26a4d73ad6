"""What a run did, pass by pass: the printed table, the JSON/Markdown report, polygraphy files.

The JSON schema is documented in README.md ("Report schema"). Numeric results are also saved in
polygraphy's own formats next to a JSON report: ``<stem>.inputs.json`` (feeds, for
``polygraphy run --load-inputs``) and ``<stem>.outputs.json`` (RunResults of the original and
the fixed model, for ``polygraphy run --load-outputs``).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from graphfix.errors import cut, visible
from graphfix.model_io import write_atomic

SCHEMA_VERSION = 2

#: End-to-end acceptance in multiples of the original model's noise floor (graphfix.verify).
NOISE_MULTIPLE = 10

#: Verdicts, in the words the table and the JSON use.
KEPT, UNVERIFIED, UNCHANGED, ROLLED_BACK, ERROR = "kept", "kept-unverified", "unchanged", "rolled-back", "error"


@dataclass
class PassRecord:
    name: str
    verdict: str
    matched: int = 0
    rewritten: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    seconds: float = 0.0
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[dict[str, str]] = field(default_factory=list)
    reason: str = ""
    rolled_back_nodes: int = 0

    @property
    def worst(self) -> tuple[str, float, float] | None:
        if not self.outputs:
            return None
        name = max(self.outputs, key=lambda k: (self.outputs[k]["max_abs"], self.outputs[k]["max_rel"]))
        return name, self.outputs[name]["max_abs"], self.outputs[name]["max_rel"]


@dataclass
class Report:
    input: str | None
    output: str | None
    settings: dict[str, Any]
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    passes: list[PassRecord] = field(default_factory=list)
    sessions: int = 0
    search_sessions: int = 0
    verification: str = ""
    shapes: dict[str, Any] = field(default_factory=dict)
    #: node-level records: one per rewritten region (passes, nodes, outputs, verdict, diagram)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    #: the end-to-end comparison again under the settings users run (onnxruntime's defaults:
    #: "settings", per output "outputs", regions undone for a difference there only "rolled_back")
    users: dict[str, Any] = field(default_factory=dict)
    #: the original model's own noise floor per output (max abs), measured when the strict
    #: end-to-end comparison failed (None: not needed)
    noise_floor: dict[str, float] | None = None
    #: decisions (ArgMax/TopK/comparisons) the outputs depend on: margins and flips (graphfix.discrete)
    discrete: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    trt: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)

    @property
    def blocking_left(self) -> list[dict[str, Any]]:
        """The findings for which the ``--trt`` target still rejects the fixed model (exit 4)."""
        if not self.trt:
            return []
        return [f for f in self.trt["after"]["findings"] if f["severity"] == "blocking"]

    @property
    def status(self) -> str:
        if self.blocking_left:
            return "blocked"
        if any(p.verdict in (ROLLED_BACK, ERROR) or p.rolled_back_nodes for p in self.passes):
            return "rolled-back"
        return "ok"

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data = {"schema": SCHEMA_VERSION, "tool": "graphfix", "status": self.status, **data}
        return _finite(data)


def _finite(obj: Any) -> Any:
    """JSON has no inf/nan: write them as strings so every JSON reader accepts the report."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


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
    return [(same[0], _more_like(same)) for same in group_by(findings, key)]


def _more_like(same: list[dict], show=str) -> str:
    """"and N more like it: a, b, …"; ``show`` writes one node name (Markdown: as a code span)."""
    others = [g.get("node") or "(model)" for g in same[1:]]
    named = ", ".join(show(o) for o in others[:NAMED]) + (f", … ({len(others) - NAMED} more)" if len(others) > NAMED else "")
    return f"and {len(others)} more like it: {named}" if others else ""


def in_parens(like: str) -> str:
    return f" ({like})" if like else ""


#: A Markdown report stays readable (and under 1 MB) however many regions a run rewrote: at most
#: this many diagrams (and per kind of rewrite) and table rows per list; the JSON has every record.
MAX_DIAGRAMS, DIAGRAMS_PER_KIND, MAX_ROWS = 20, 3, 50


#: Characters of one model string (a node, tensor or op name) a Markdown or HTML report shows, and
#: of one message; the JSON report has them whole (a 100,000-character name is a 100 KB line).
MAX_NAME, MAX_TEXT = 160, 1000
#: Markdown characters that start markup inline: code spans, emphasis, links, raw HTML, entities,
#: table cells, strikethrough, math. Each is written backslash-escaped, so it shows as itself
#: (``>`` starts nothing inside a line, and model text never starts one).
_MD_SPECIAL = frozenset("\\`*_[]<&|~$")


def md_text(text: object, limit: int = MAX_TEXT) -> str:
    """Model text as inert Markdown on one line: whitespace runs (newlines too) as one space,
    control characters as their escapes, markup characters backslash-escaped (``<script>`` shows
    as text, ``&lt;`` as itself), cut to ``limit`` characters."""
    flat = visible(cut(" ".join(str(text).split()), limit))
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in flat) or "-"


#: Text that stays inside one Markdown table cell (and renders as the text it is).
md_cell = md_text


def md_code(text: object, limit: int = MAX_NAME, cell: bool = True) -> str:
    """A name as a Markdown code span that nothing in it can close: the fence is one backtick
    longer than the longest run inside, control characters are escapes (no line break), and in a
    table cell ``|`` is ``\\|`` (GFM reads that inside code spans too)."""
    body = visible(cut(str(text), limit))
    if not body:
        return "(empty)"
    fence = "`" * (max((len(r) for r in re.findall("`+", body)), default=0) + 1)
    pad = " " if body[0] in "` " or body[-1] in "` " else ""  # a space each side is removed again by the reader
    return f"{fence}{pad}{body.replace('|', chr(92) + '|') if cell else body}{pad}{fence}"


def _rows(head: list[str], rows: list[list[str]], what: str) -> list[str]:
    """A Markdown table of at most MAX_ROWS rows, then how many were left out."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        out += ["", f"… {len(rows) - MAX_ROWS} more {what} (every one is in the JSON report)"]
    return out


def _pass_rows(report: Report) -> list[list[str]]:
    """One row per pass with its worst output (as the terminal table), then each mismatch."""
    rows = []
    for p in report.passes:
        worst = p.worst
        rows.append([md_text(p.name), str(p.matched), str(p.rewritten), f"{p.nodes_before}→{p.nodes_after}" if p.rewritten else "-",
                     md_code(worst[0]) + (f" (of {len(p.outputs)})" if len(p.outputs) > 1 else "") if worst else "-",
                     _num(worst[1]) if worst else "-", _num(worst[2]) if worst else "-", md_text(p.verdict), f"{p.seconds:.2f}s"])
        bad = [(k, d) for k, d in p.outputs.items() if not d["passed"]]
        rows += [["", "", "", "", md_code(k), _num(d["max_abs"]), _num(d["max_rel"]), "MISMATCH", ""] for k, d in bad[:NAMED]]
        if len(bad) > NAMED:
            rows.append(["", "", "", "", f"… {len(bad) - NAMED} more mismatching outputs", "", "", "", ""])
    return rows


_NODE = re.compile(r"^(\S+) '(.*)'$", re.S)


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


def node_parts(text: str) -> tuple[str, str]:
    """("Clip", "/normalize0/Clip") from a node record's "Clip '/normalize0/Clip'"."""
    m = _NODE.match(text)
    return (m.group(1), m.group(2)) if m else (text, "")


def fenced(diagram: str) -> str:
    """A diagram inside a fenced block: its lines bounded (MAX_TEXT), control characters as
    escapes and no line that could close the fence (labels are quoted and entity-escaped by
    graphfix.regions; this holds for a diagram read back from an older JSON report too)."""
    lines = [visible(cut(line, MAX_TEXT)) for line in diagram.split("\n")]
    return "\n".join(line if not line.lstrip().startswith(("```", "~~~")) else "%% " + line.replace("`", "#96;")
                     for line in lines)


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
    the shape tensors computed from one data source as one group (graphfix.trt.check.finding_groups),
    each such group with its headline and "read by …" and "path: …" lines (None for the others)."""
    from graphfix.trt.check import data_source_lines, finding_groups, from_data

    out: list[tuple[list[dict[str, Any]], list[str] | None]] = []
    for same in finding_groups(findings):
        if from_data(same[0]):
            head, lines = data_source_lines(same, "")
            out.append((same, [head, *lines[:2]]))
        else:
            out.append((same, None))
    return out


def _trt_table(check: dict[str, Any]) -> list[str]:
    """One TensorRT check as a table of distinct findings, with how many nodes each covers."""
    if not check["findings"]:
        return ["no findings"]
    rows = []
    for same, data in trt_groups(check["findings"]):
        f = same[0]
        if data is not None:  # shape tensors computed from one data source: one row, the source as "where"
            rows.append([md_text(f["severity"]), md_text("+".join(dict.fromkeys(g["op"] for g in same))), str(len(same)),
                         md_code(f["path"][0]), md_text("; ".join(data)), md_text(f.get("remedy") or "-")])
            continue
        where = f"{md_code(f['node'])}{in_parens(_more_like(same, md_code))}" if f["node"] else "-"
        rows.append([md_text(f["severity"]), md_text(f["op"] or "(model)"), str(len(same)), where, md_text(f["message"]),
                     md_text(f.get("remedy") or "-")])
    return _rows(["severity", "op", "nodes", "where", "finding", "remedy"], rows, "kinds of finding")


def markdown(report: Report) -> str:
    """The report for people: grouped and bounded (MAX_DIAGRAMS, MAX_ROWS) so that a 100k-node
    run stays readable; the JSON report keeps every record."""
    out = ["# graphfix report", "", f"- input: {md_code(report.input, MAX_TEXT, False)}",
           f"- output: {md_code(report.output, MAX_TEXT, False)}",
           f"- status: **{report.status}**", f"- onnxruntime sessions: {report.sessions}", "",
           *_rows(["pass", "matched", "rewritten", "nodes", "worst output", "max abs", "max rel", "verdict", "time"],
                  _pass_rows(report), "rows")]
    notes = [f"- **{md_text(p.name)}**: {md_text(p.reason)}" for p in report.passes if p.reason]
    notes += [f"- **{md_text(p.name)}**: {md_text(f['op'])} {md_code(f['node'], cell=False)} not rewritten: {md_text(f['message'])}"
              + in_parens(_more_like(same, lambda n: md_code(n, cell=False)))
              for p in report.passes for same in group_by(p.findings, ("op", "message")) for f in same[:1]]
    if notes:
        out += ["", "## Findings", "", *notes[:MAX_ROWS]]
        out += [f"- … {len(notes) - MAX_ROWS} more (every one is in the JSON report)"] if len(notes) > MAX_ROWS else []
    if report.shapes or report.inputs:
        out += ["", "## Verification", "", f"- {md_text(report.verification or 'node by node: probe + end-to-end run')}",
                f"- shapes: {md_text(report.shapes.get('reason', ''))}"]
        out += [f"  - {md_code(json.dumps(s), MAX_TEXT, False)}" for s in report.shapes.get("shapes", [])[:NAMED]]
        out += [f"- note: {md_text(n)}" for n in report.notes[:MAX_ROWS]]
        out += users_lines(report.users)
        if report.noise_floor:
            out += [f"- noise floor of the original model (max abs per output, accepted up to {NOISE_MULTIPLE}x end to end): "
                    + ", ".join(f"{md_code(k, cell=False)} {_num(v)}" for k, v in list(report.noise_floor.items())[:NAMED])]
        out += [f"- {md_text(line.strip())}" for line in discrete_lines(report.discrete)[:MAX_ROWS]]
        if report.inputs:
            out += ["", *_rows(["input", "dtype", "shape"], [[md_code(k), md_text(v["dtype"]), md_text(v["shape"])]
                                                              for k, v in report.inputs.items()], "inputs")]
    if report.nodes:
        groups = rewrite_groups(report.nodes)
        out += ["", "## Rewrites", "", f"{len(report.nodes)} rewritten region(s) in {len(groups)} kind(s).", ""]
        out += _rows(["passes", "replaced", "regions", "verdict", "worst max abs", "nodes"], [[
            md_text(", ".join(g[0]["passes"])), md_text(" + ".join(node_parts(n)[0] for n in g[0]["nodes"])), str(len(g)),
            f"**{md_text(g[0]['verdict'])}**", _worst_diff(g),
            ", ".join(f"{md_text(op)} {md_code(name)}" for r in g[:NAMED] for op, name in map(node_parts, r["nodes"])) + (f", … {len(g) - NAMED} more" if len(g) > NAMED else ""),
        ] for g in groups], "kinds of rewrite")
        costs = pass_costs(report)
        if costs:
            out += ["", "## What the rewrites cost", "",
                    "Per pass, the kept regions' floating-point operations and bytes moved before and after the "
                    "rewrite (a device-independent estimate at the shapes graphfix infers; each region's figures are in "
                    "the JSON report).", ""]
            out += _rows(COST_HEAD, [[md_text(k), str(n), *cost_cells(sums), str(sums["unknown_nodes"])]
                                     for k, n, sums in costs], "passes")
        drawn = _drawn(groups)
        out += ["", "## Rewritten regions", "",
                f"{len(drawn)} of {len(report.nodes)} drawn (each kind of rewrite first); every diagram is in the JSON report."]
        for r in drawn:
            diffs = ", ".join(f"{md_code(k, cell=False)} max abs {_num(d['max_abs'])}" for k, d in list(r["outputs"].items())[:NAMED]) or "-"
            heading = ", ".join(f"{md_text(op)} {md_code(name, cell=False)}" for op, name in map(node_parts, r["nodes"]))
            out += ["", f"### {heading} — {md_text(', '.join(r['passes']))}: **{md_text(r['verdict'])}**", "",
                    f"checked {md_text(r['checked'])}; {diffs}" + (f"; rolled back: {md_text(r['reason'])}" if r.get("reason") else ""),
                    "", "```mermaid", fenced(r["diagram"]), "```"]
    if report.trt:
        before, after = report.trt["before"], report.trt["after"]
        out += ["", f"## TensorRT {report.trt['version']} check", ""]
        out += [f"- {md_text(n)}" for n in dict.fromkeys((before.get("note"), after.get("note"))) if n]
        for title, check in (("before", before), ("after", after)):
            blocking = sum(f["severity"] == "blocking" for f in check["findings"])
            out += [f"### {title}: {blocking} blocking finding(s)", "", *_trt_table(check), ""]
    return "\n".join(out).rstrip("\n") + "\n"


# --------------------------------------------------------------------- files
def write(report: Report, path: str | os.PathLike) -> None:
    """``.md`` writes Markdown, ``.html`` one self-contained page, anything else JSON (atomically)."""
    suffix = os.path.splitext(str(path))[1]
    if suffix == ".html":
        from graphfix.report_html import page

        text = page(report)
    else:
        text = markdown(report) if suffix == ".md" else json.dumps(report.as_dict(), indent=2) + "\n"
    write_atomic(path, text.encode(), "report")
