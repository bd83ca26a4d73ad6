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
from dataclasses import asdict, dataclass, field
from typing import Any

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
    #: the original model's own noise floor per output (max abs), measured when the strict
    #: end-to-end comparison failed (None: not needed)
    noise_floor: dict[str, float] | None = None
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
    if report.notes:
        notes += report.notes
    if notes:
        lines += ["", *notes]
    verified = "verification off" if not report.settings.get("verify", True) else f"{report.sessions} onnxruntime session(s)"
    lines += ["", f"{len(report.passes)} pass(es), {verified}, {report.seconds:.2f}s; status: {report.status}"]
    return "\n".join(lines)


#: Nodes named after the first when the same finding repeats.
NAMED = 5


def grouped(findings: list[dict], key: tuple[str, ...] = ("op", "message")) -> list[tuple[dict, str]]:
    """Each distinct finding once, with "and N more like it: ..." naming the other nodes (empty
    when there are none): an export repeats its blocks, and 25000 identical lines hide the one
    that differs."""
    groups: dict[tuple, list[dict]] = {}
    for f in findings:
        groups.setdefault(tuple(f.get(k) for k in key), []).append(f)
    out = []
    for same in groups.values():
        others = [g.get("node") or "(model)" for g in same[1:]]
        named = ", ".join(others[:NAMED]) + (f", … ({len(others) - NAMED} more)" if len(others) > NAMED else "")
        out.append((same[0], f"and {len(others)} more like it: {named}" if others else ""))
    return out


def in_parens(like: str) -> str:
    return f" ({like})" if like else ""


def markdown(report: Report) -> str:
    out = ["# graphfix report", "", f"- input: `{report.input}`", f"- output: `{report.output}`",
           f"- status: **{report.status}**", f"- onnxruntime sessions: {report.sessions}", "",
           "| pass | matched | rewritten | nodes | output | max abs | max rel | verdict | time |",
           "|---|---:|---:|---|---|---:|---:|---|---:|"]
    for p in report.passes:
        nodes = f"{p.nodes_before}→{p.nodes_after}" if p.rewritten else "-"
        outs = list(p.outputs.items()) or [("-", None)]
        for k, (name, d) in enumerate(outs):
            first = k == 0
            out.append("| " + " | ".join([
                p.name if first else "", str(p.matched) if first else "", str(p.rewritten) if first else "",
                nodes if first else "", f"`{name}`" if d else "-",
                _num(d["max_abs"]) if d else "-", _num(d["max_rel"]) if d else "-",
                (p.verdict if d is None or d["passed"] else f"{p.verdict} (mismatch)") if first or d else "",
                f"{p.seconds:.2f}s" if first else "",
            ]) + " |")
    notes = [f"- **{p.name}**: {p.reason}" for p in report.passes if p.reason]
    notes += [f"- **{p.name}**: {f['op']} `{f['node']}` not rewritten: {f['message']}{in_parens(like)}"
              for p in report.passes for f, like in grouped(p.findings)]
    if notes:
        out += ["", "## Findings", "", *notes]
    if report.shapes:
        out += ["", "## Verification", "", f"- {report.verification or 'node by node: probe + end-to-end run'}",
                f"- shapes: {report.shapes.get('reason', '')}"]
        out += [f"  - `{json.dumps(s)}`" for s in report.shapes.get("shapes", [])]
        out += [f"- note: {n}" for n in report.notes]
    if report.nodes:
        out += ["", "## Rewritten nodes"]
        for r in report.nodes:
            diffs = ", ".join(f"`{k}` max abs {_num(d['max_abs'])}" for k, d in r["outputs"].items()) or "-"
            out += ["", f"### {', '.join(r['nodes'])} — {', '.join(r['passes'])}: **{r['verdict']}**", "",
                    f"checked {r['checked']}; {diffs}", "", "```mermaid", r["diagram"], "```"]
    if report.trt:
        out += ["", "## TensorRT check", "", "```json", json.dumps(report.trt, indent=2), "```"]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------- files
def write(report: Report, path: str | os.PathLike) -> None:
    """``.md`` writes Markdown, anything else JSON (atomically)."""
    text = markdown(report) if str(path).endswith(".md") else json.dumps(report.as_dict(), indent=2) + "\n"
    write_atomic(path, text.encode(), "report")
