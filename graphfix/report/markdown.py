"""The Markdown report.
"""

from __future__ import annotations

import json
import re
from typing import Any

from graphfix.errors import cut, visible
from graphfix.report.model import Report
from graphfix.report.summary import (
    COST_HEAD,
    NAMED,
    _drawn,
    _num,
    _worst_diff,
    cost_cells,
    discrete_lines,
    group_by,
    in_parens,
    more_like,
    pass_costs,
    rewrite_groups,
    trt_groups,
    users_lines,
)
from graphfix.report.text import MAX_ROWS, MAX_TEXT, md_code, md_text
from graphfix.verify.compare import NOISE_MULTIPLE


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


def node_parts(text: str) -> tuple[str, str]:
    """("Clip", "/normalize0/Clip") from a node record's "Clip '/normalize0/Clip'"."""
    m = _NODE.match(text)
    return (m.group(1), m.group(2)) if m else (text, "")


def fenced(diagram: str) -> str:
    """A diagram inside a fenced block: its lines bounded (MAX_TEXT), control characters as
    escapes and no line that could close the fence (labels are quoted and entity-escaped by
    graphfix.verify.regions; this holds for a diagram read back from an older JSON report too)."""
    lines = [visible(cut(line, MAX_TEXT)) for line in diagram.split("\n")]
    return "\n".join(line if not line.lstrip().startswith(("```", "~~~")) else "%% " + line.replace("`", "#96;")
                     for line in lines)


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
        where = f"{md_code(f['node'])}{in_parens(more_like(same, md_code))}" if f["node"] else "-"
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
              + in_parens(more_like(same, lambda n: md_code(n, cell=False)))
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
