"""The HTML report (``--report r.html``): one self-contained page for people, opened offline.

Deploy boxes are often air-gapped, so the page references nothing outside itself: no script,
no stylesheet or font from a CDN; the CSS is inline and each rewritten region's before/after
graph is an inline SVG laid out here, in Python (columns by topological depth, ops as boxes,
tensors as rounded boxes, edges as curves). It is bounded like the Markdown report (grouped
rewrites, at most ``MAX_DIAGRAMS`` drawings, ``MAX_ROWS`` rows a table); the JSON keeps every
record. Every string from the model (tensor and node names hold anything) goes through
:func:`esc`.
"""

from __future__ import annotations

import html
import json
from typing import Any

from graphfix import passes as registry
from graphfix.errors import cut, visible
from graphfix.report.diagram import DrawnGraph, diagram_graphs
from graphfix.report.markdown import node_parts
from graphfix.report.model import KEPT, UNCHANGED, Report
from graphfix.report.summary import (
    COST_HEAD,
    NAMED,
    _drawn,
    _num,
    cost_cells,
    discrete_lines,
    grouped,
    pass_costs,
    rewrite_groups,
    trt_groups,
)
from graphfix.report.text import MAX_NAME, MAX_ROWS, MAX_TEXT
from graphfix.trt import support
from graphfix.trt.versions import TrtVersion
from graphfix.verify.compare import NOISE_MULTIPLE


def esc(text: object, limit: int = MAX_TEXT) -> str:
    """Text as HTML/SVG character data or attribute value (quotes included), cut to ``limit``
    characters, control characters (NUL, ESC, BEL, CR) as their escapes."""
    return html.escape(visible(cut(str(text), limit)), quote=True)


# ------------------------------------------------------------------------------ SVG
#: Approximate glyph widths (px) of the SVG fonts below; boxes are sized from them.
_CHAR_W, _SMALL_W = 7.4, 6.4
_LABEL_CHARS = 44
_GAP_X, _GAP_Y, _PAD = 46, 12, 10
_STYLE = {
    "op": 'rx="3" fill="#dbe7fb" stroke="#3b5f9a"',
    "tensor": 'rx="13" fill="#ffffff" stroke="#7a7a7a"',
    "constant": 'rx="3" fill="#f3f0e6" stroke="#9a8a5a" stroke-dasharray="4 2"',
}


def _cut(text: str, limit: int = _LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _lines(kind: str, label: str) -> tuple[str, str]:
    """Bold first line and small second line: op type / node name, tensor name / dtype+shape."""
    if kind == "op":
        op, _, name = label.partition(" ")
        return op, name
    name, sep, typ = label.rpartition(": ")
    return (name, typ) if sep else (label, "")


def _depths(g: DrawnGraph) -> dict[str, int]:
    """Longest path from a source, per node (bounded relaxation: a cycle cannot hang it); a
    source moves right next to its first reader, so that its edge crosses no box."""
    preds: dict[str, list[str]] = {n: [] for n in g.nodes}
    for a, b in g.edges:
        if a in preds and b in preds:
            preds[b].append(a)
    depth = dict.fromkeys(g.nodes, 0)
    for _ in range(len(g.nodes)):
        changed = False
        for n, ps in preds.items():
            d = max((depth[p] + 1 for p in ps), default=0)
            if d > depth[n]:
                depth[n], changed = d, True
        if not changed:
            break
    succs: dict[str, list[str]] = {n: [] for n in g.nodes}
    for b, ps in preds.items():
        for a in ps:
            succs[a].append(b)
    for n, ps in preds.items():  # an input or constant sits just before its first reader
        if not ps and succs[n]:
            depth[n] = max(min(depth[s] for s in succs[n]) - 1, 0)
    return depth


def svg(g: DrawnGraph, uid: str, title: str) -> str:
    """One side of a region as an inline SVG: a layered layout, left to right."""
    depth = _depths(g)
    columns: dict[int, list[str]] = {}
    for n in g.nodes:
        columns.setdefault(depth[n], []).append(n)
    preds: dict[str, list[str]] = {n: [] for n in g.nodes}
    for a, b in g.edges:
        if a in preds and b in preds:
            preds[b].append(a)
    row: dict[str, float] = {}
    for d in sorted(columns):  # order each column by where its inputs are (fewer crossings)
        col = columns[d]
        if d:
            col.sort(key=lambda n: sum(row.get(p, 0) for p in preds[n]) / max(len(preds[n]), 1))
        row.update({n: k for k, n in enumerate(col)})
    size: dict[str, tuple[float, float]] = {}
    for n, (kind, label) in g.nodes.items():
        top, bottom = _lines(kind, label)
        w = max(len(_cut(top)) * _CHAR_W, len(_cut(bottom)) * _SMALL_W) + 2 * _PAD
        size[n] = (max(w, 56.0), 38.0 if bottom else 24.0)
    heights = {d: sum(size[n][1] for n in col) + _GAP_Y * (len(col) - 1) for d, col in columns.items()}
    total_h = max(heights.values()) + 2 * _PAD + 18
    pos: dict[str, tuple[float, float]] = {}
    x = _PAD
    for d in sorted(columns):
        y = 18 + _PAD + (total_h - 18 - 2 * _PAD - heights[d]) / 2
        for n in columns[d]:
            pos[n] = (x, y)
            y += size[n][1] + _GAP_Y
        x += max(size[n][0] for n in columns[d]) + _GAP_X
    total_w = x - _GAP_X + _PAD
    out = [f'<svg class="graph" width="{total_w:.0f}" height="{total_h:.0f}" '
           f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" role="img" aria-label="{esc(title)}">',
           f'<defs><marker id="{uid}-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
           f'<text x="{_PAD}" y="14" class="side">{esc(title)}</text>']
    for a, b in g.edges:
        if a not in pos or b not in pos:
            continue
        (xa, ya), (wa, ha) = pos[a], size[a]
        (xb, yb), (_, hb) = pos[b], size[b]
        x1, y1, x2, y2 = xa + wa, ya + ha / 2, xb, yb + hb / 2
        mid = (x1 + x2) / 2
        out.append(f'<path d="M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}" '
                   f'fill="none" stroke="#555" stroke-width="1.2" marker-end="url(#{uid}-arrow)"/>')
    for n, (kind, label) in g.nodes.items():
        (x0, y0), (w, h) = pos[n], size[n]
        top, bottom = _lines(kind, label)
        out.append(f'<g class="{kind}"><title>{esc(label, MAX_NAME)}</title>'
                   f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" {_STYLE[kind]}/>'
                   f'<text x="{x0 + _PAD:.1f}" y="{y0 + 16:.1f}" class="top">{esc(_cut(top))}</text>'
                   + (f'<text x="{x0 + _PAD:.1f}" y="{y0 + 31:.1f}" class="bottom">{esc(_cut(bottom))}</text>' if bottom else "")
                   + "</g>")
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------------------ HTML pieces
def _table(head: list[str], rows: list[list[str]], what: str, cls: str = "") -> str:
    """Cells are HTML already (callers escape); at most MAX_ROWS rows, then how many were left out."""
    out = [f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    out += ["<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows[:MAX_ROWS]]
    out.append("</tbody></table>")
    if len(rows) > MAX_ROWS:
        out.append(f'<p class="more">… {len(rows) - MAX_ROWS} more {esc(what)} (every one is in the JSON report)</p>')
    return "".join(out)


def _code(text: object, limit: int = MAX_NAME) -> str:
    """A name (free text from the model), cut to ``limit`` characters: the JSON has it whole."""
    return f"<code>{esc(text, limit)}</code>"


def _verdict(v: str) -> str:
    cls = {"kept": "ok", "ok": "ok", "unchanged": "dim", "kept-unverified": "warn"}.get(v, "bad")
    return f'<span class="badge {cls}">{esc(v)}</span>'


def _pass_rows(passes: list) -> list[list[str]]:
    rows = []
    for p in passes:
        worst = p.worst
        rows.append([esc(p.name), str(p.matched), str(p.rewritten),
                     f"{p.nodes_before}→{p.nodes_after}" if p.rewritten else "-",
                     _code(worst[0]) + (f" (of {len(p.outputs)})" if len(p.outputs) > 1 else "") if worst else "-",
                     _num(worst[1]) if worst else "-", _num(worst[2]) if worst else "-",
                     _verdict(p.verdict) + (f" ({p.rolled_back_nodes} rolled back)" if p.rolled_back_nodes else ""),
                     f"{p.seconds:.2f}s"])
        bad = [(k, d) for k, d in p.outputs.items() if not d["passed"]]
        rows += [["", "", "", "", _code(k), _num(d["max_abs"]), _num(d["max_rel"]), _verdict("mismatch"), ""] for k, d in bad[:NAMED]]
    return rows


_PASS_HEAD = ["pass", "matched", "rewritten", "nodes", "worst output", "max abs", "max rel", "verdict", "time"]


def _passes_section(report: Report) -> list[str]:
    active = [p for p in report.passes if p.verdict != UNCHANGED or p.matched]
    idle = [p for p in report.passes if p not in active]
    out = ["<h2>Passes</h2>", _table(_PASS_HEAD, _pass_rows(active), "passes") if active else "<p>No pass rewrote anything.</p>"]
    if idle:
        out.append(f"<details><summary>{len(idle)} pass(es) found nothing to rewrite</summary>"
                   + _table(_PASS_HEAD, _pass_rows(idle), "passes") + "</details>")
    notes = [f"<b>{esc(p.name)}</b>: {esc(p.reason)}" for p in report.passes if p.reason]
    notes += [f"<b>{esc(p.name)}</b>: {esc(f['op'])} {_code(f['node'])} not rewritten: {esc(f['message'])}"
              + (f" ({esc(like)})" if like else "") for p in report.passes for f, like in grouped(p.findings)]
    if notes:
        out += ["<h3>Findings</h3><ul>", *(f"<li>{n}</li>" for n in notes[:MAX_ROWS]), "</ul>"]
        if len(notes) > MAX_ROWS:
            out.append(f'<p class="more">… {len(notes) - MAX_ROWS} more (every one is in the JSON report)</p>')
    return out


def _verification_section(report: Report) -> list[str]:
    if not report.settings.get("verify", True):
        return ["<h2>Verification</h2><p>Verification was off (<code>--no-verify</code>): rewrites are kept unverified.</p>"]
    shapes = report.shapes or {}
    facts = [("mode", esc(report.verification or "node by node: probe + end-to-end run")),
             ("onnxruntime sessions", f"{report.sessions} (+{report.search_sessions} for the shape search)"),
             ("shapes", esc(shapes.get("reason", "-")) + (f" ({shapes['tried']} tried)" if shapes.get("tried") else ""))]
    facts += [("", _code(json.dumps(s))) for s in shapes.get("shapes", [])[:NAMED]]
    atol, rtol = report.settings.get("atol"), report.settings.get("rtol")
    facts.append(("tolerance", "automatic: 1e-5 widened to each region's float32 rounding and, end to end, to "
                  f"{NOISE_MULTIPLE}x the original model's noise floor" if atol is None and rtol is None
                  else f"atol {esc(atol)}, rtol {esc(rtol)} (exactly)"))
    out = ["<h2>Verification</h2>", '<table class="facts">'
           + "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in facts) + "</table>"]
    if report.inputs:
        out += ["<h3>Inputs fed</h3>", _table(["input", "dtype", "shape"], [[_code(k), esc(v["dtype"]), esc(v["shape"])]
                                                                           for k, v in report.inputs.items()], "inputs")]
    if report.final:
        floor = report.noise_floor or {}
        out += ["<h3>End to end (fixed model against the original)</h3>",
                _table(["output", "max abs", "max rel", "noise floor", "passed"],
                       [[_code(k), _num(d["max_abs"]), _num(d["max_rel"]), _num(floor[k]) if k in floor else "-",
                         _verdict(KEPT if d["passed"] else "mismatch") + (f" {esc(d['note'])}" if d.get("note") else "")]
                        for k, d in report.final.items()], "outputs")]
    if report.noise_floor and not report.final:
        out += ["<h3>Noise floor of the original model</h3>",
                _table(["output", "max abs"], [[_code(k), _num(v)] for k, v in report.noise_floor.items()], "outputs")]
    if report.discrete:
        lines = discrete_lines(report.discrete)
        out += ["<h3>Discrete decisions</h3>", f"<p>{esc(lines[0])}</p>",
                _table(["node", "op", "closest margin", "flipped", "margins at flips", "near-ties"],
                       [[_code(n), esc(r["op"]), _num(r["min_margin"]), str(r["flipped"]),
                         esc(", ".join(_num(m) for m in r["margins_at_flips"])) or "-", "yes" if r["near_ties"] else "no"]
                        for n, r in report.discrete["decisions"].items()], "decisions")]
    if report.notes:
        out += ["<h3>Notes</h3><ul>", *(f"<li>{esc(n)}</li>" for n in report.notes[:MAX_ROWS]), "</ul>"]
    return out


def _why(used: dict[str, set[str]], target: str | None) -> str:
    """Per pass, its rules that are about the ops it replaced: what each TensorRT range rejects and
    the message it prints (the registry's own declaration: graphfix/passes)."""

    rows, elsewhere = [], []
    for name, ops in used.items():
        try:
            p = registry.get(name)
        except Exception:  # noqa: BLE001 - a custom pass the registry does not know
            continue
        rules = [r for r in p.rules if r.ops is None or r.ops & ops] or list(p.rules)
        for r in rules:
            entry = support.error(r.error) if r.error else None
            examples = (entry or {}).get("examples", [])
            said = next((e for e in examples if any(op in e for op in ops)), examples[0] if examples else "")
            try:
                releases, here = support.describe_range(r.range), target is None or TrtVersion(target) in r.range
            except ValueError:
                releases, here = r.versions, True
            (rows if here else elsewhere).append([
                esc(name), esc(r.kind), esc(releases), esc(r.message),
                (_code(r.error) + (f"<br><q>{esc(said)}</q>" if said else "")) if r.error else "-",
                esc(r.evidence or "-") + ("" if r.certain else " (uncertain)")])
    head = ["pass", "rule", "TensorRT releases", "what it rejects", "error it prevents", "evidence"]
    out = _table(head, rows, "rules", "why") if rows else ""
    if elsewhere:
        out += (f"<details><summary>{len(elsewhere)} more rule(s) of these passes, for releases other than "
                f"TensorRT {esc(target)}</summary>" + _table(head, elsewhere, "rules", "why") + "</details>")
    return out


def _rewrites_section(report: Report) -> list[str]:
    if not report.nodes:
        return []
    groups = rewrite_groups(report.nodes)
    target = report.settings.get("trt")
    out = ["<h2>Rewrites</h2>", f"<p>{len(report.nodes)} rewritten region(s) in {len(groups)} kind(s).</p>"]
    rows = []
    for g in groups:
        ops = [node_parts(n)[0] for n in g[0]["nodes"]]
        diffs = [(d["max_abs"], k) for r in g for k, d in r["outputs"].items()]
        worst = max(diffs, key=lambda d: d[0]) if diffs else None
        names = [node_parts(n)[1] for r in g[:NAMED] for n in r["nodes"]]
        rows.append([esc(", ".join(g[0]["passes"])), esc(" + ".join(ops)), str(len(g)), _verdict(g[0]["verdict"]),
                     f"{_num(worst[0])} ({_code(worst[1])})" if worst else "-",
                     ", ".join(_code(n) for n in names) + (f", … {len(g) - NAMED} more" if len(g) > NAMED else "")])
    out.append(_table(["passes", "replaced", "regions", "verdict", "worst max abs", "nodes"], rows, "kinds of rewrite"))
    costs = pass_costs(report)
    if costs:
        out += ["<h3>What the rewrites cost</h3><p>Per pass, the kept regions' floating-point operations and bytes moved "
                "before and after the rewrite (a device-independent estimate at the shapes graphfix infers; each "
                "region's figures are in the JSON report).</p>",
                _table(COST_HEAD, [[esc(k), str(n), *map(esc, cost_cells(sums)), str(sums["unknown_nodes"])]
                                   for k, n, sums in costs], "passes")]
    used: dict[str, set[str]] = {}
    for r in report.nodes:
        for p in r["passes"]:
            used.setdefault(p, set()).update(node_parts(n)[0] for n in r["nodes"])
    drawn = _drawn(groups)
    out += ["<h2>Rewritten regions</h2>",
            f"<p>{len(drawn)} of {len(report.nodes)} drawn (each kind of rewrite first); every diagram is in the JSON report.</p>"]
    before = {f["node"]: f for f in (report.trt or {}).get("before", {}).get("findings", []) if f["node"]}
    for k, r in enumerate(drawn):
        names = [node_parts(n) for n in r["nodes"]]
        out.append(f'<section class="region" id="region-{k}"><h3>'
                   + ", ".join(f"{esc(op)} {_code(name)}" for op, name in names)
                   + f" — {esc(', '.join(r['passes']))} {_verdict(r['verdict'])}</h3>")
        facts = [f"checked: {esc(r['checked'])}"] + ([f"<b>rolled back</b>: {esc(r['reason'])}"] if r.get("reason") else [])
        said = [before[name] for _, name in names if name in before]
        facts += [f"TensorRT {esc(report.trt['before'].get('version_used', target))} before: {esc(f['message'])}"
                  + (f" — <q>{esc(f['error_text'])}</q>" if f.get("error_text") else "") for f in said[:NAMED]]
        out.append("<ul>" + "".join(f"<li>{f}</li>" for f in facts) + "</ul>")
        if r["outputs"]:
            out.append(_table(["recomputed tensor", "max abs", "max rel", "passed"],
                              [[_code(t), _num(d["max_abs"]), _num(d["max_rel"]), _verdict(KEPT if d["passed"] else "mismatch")]
                               for t, d in r["outputs"].items()], "tensors"))
        sides = diagram_graphs(r.get("diagram") or "")
        out.append('<div class="sides">' + "".join(f'<div class="side">{svg(g, f"r{k}{side}", side)}</div>'
                                                   for side, g in sides.items()) + "</div></section>")
    why = _why(used, target)
    if why:
        out += ["<h2>Why: what each rewrite prevents</h2>"
                + (f"<p>The rules of TensorRT {esc(target)} these passes enforce.</p>" if target else ""), why]
    return out


def _trt_rows(check: dict[str, Any]) -> list[list[str]]:
    rows = []
    for same, data in trt_groups(check["findings"]):
        f = same[0]
        if data is not None:  # shape tensors computed from one data source: one row
            rows.append([_verdict("blocking") if f["severity"] == "blocking" else esc(f["severity"]),
                         esc("+".join(dict.fromkeys(g["op"] for g in same))), str(len(same)), _code(f["path"][0]),
                         "<br>".join(esc(line) for line in data) + (f"<br><q>{esc(f['error_text'])}</q>" if f.get("error_text") else ""),
                         esc(f.get("remedy") or "-")])
            continue
        others = [g["node"] or "(model)" for g in same[1:]]
        where = (_code(f["node"]) + (f" and {len(others)} more: " + ", ".join(_code(o) for o in others[:NAMED])
                                     + (" …" if len(others) > NAMED else "") if others else "")) if f["node"] else "-"
        rows.append([_verdict("blocking") if f["severity"] == "blocking" else esc(f["severity"]), esc(f["op"] or "(model)"),
                     str(len(same)), where, esc(f["message"]) + (f"<br><q>{esc(f['error_text'])}</q>" if f.get("error_text") else ""),
                     esc(f.get("remedy") or "-")])
    return rows


def _trt_section(report: Report) -> list[str]:
    if not report.trt:
        return []
    out = [f"<h2>TensorRT {esc(report.trt['version'])} check</h2>"]
    notes = [n for n in dict.fromkeys((report.trt["before"].get("note"), report.trt["after"].get("note"))) if n]
    out += [f"<p>{esc(n)}</p>" for n in notes]
    for title in ("before", "after"):
        check = report.trt[title]
        blocking = sum(f["severity"] == "blocking" for f in check["findings"])
        out.append(f"<h3>{title}: {blocking} blocking finding(s)</h3>")
        out.append(_table(["severity", "op", "nodes", "where", "finding", "remedy"], _trt_rows(check), "kinds of finding")
                   if check["findings"] else "<p>no findings</p>")
    return out


def _engine_section(report: Report) -> list[str]:
    commands = (report.engine or {}).get("commands", {})
    if not commands:
        return []
    note = (report.engine or {}).get("profile", {}).get("note", "")
    return ["<h2>Build and compare on a GPU box</h2>",
            *(f"<p><b>{esc(tool)}</b></p><pre>{esc(line, 20_000)}</pre>" for tool, line in commands.items()),
            *([f"<p>{esc(note, 20_000)}</p>"] if note else [])]


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;padding:0 16px;color:#1d1d1f}
h1{font-size:24px;margin:0 0 8px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}th,td{border:1px solid #d6d6d6;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f2f4f7}td{overflow-wrap:anywhere;max-width:520px}
table.facts th{width:180px}
code,pre,q{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
q{color:#6a3d00}pre{background:#f6f8fa;padding:8px;overflow-x:auto;white-space:pre-wrap}
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;font-weight:600}
.ok{background:#d7f5dd;color:#145c24}.bad{background:#fbdada;color:#8a1414}.warn{background:#fff1c2;color:#6b5200}.dim{background:#eee;color:#666}
.region{border:1px solid #ddd;border-radius:6px;padding:4px 12px 10px;margin:12px 0}
.sides{display:flex;flex-direction:column;gap:6px}.side{overflow-x:auto;border:1px solid #eee;background:#fcfcfd}
svg.graph text{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;fill:#1d1d1f}
svg.graph text.top{font-size:12px;font-weight:600}svg.graph text.bottom{font-size:11px;fill:#555}
svg.graph text.side{font:600 12px system-ui,sans-serif;fill:#777;text-transform:uppercase}
.more{color:#666;font-style:italic}details{margin:6px 0}
"""


def page(report: Report) -> str:
    """The whole report as one HTML document (UTF-8, no external resource)."""
    head = [("input", _code(report.input)), ("output", _code(report.output)), ("status", _verdict(report.status)),
            ("time", f"{report.seconds:.2f}s")]
    if report.trt:
        blocking = [sum(f["severity"] == "blocking" for f in report.trt[k]["findings"]) for k in ("before", "after")]
        head.append((f"TensorRT {esc(report.trt['version'])}", f"{blocking[0]} blocking finding(s) before, {blocking[1]} after"))
    body = ["<h1>graphfix report</h1>", '<table class="facts">'
            + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in head) + "</table>",
            *_passes_section(report), *_rewrites_section(report), *_trt_section(report), *_verification_section(report),
            *_engine_section(report)]
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>graphfix report: {esc(report.input)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
