"""Explaining TensorRT / trtexec / polygraphy build logs with the error corpus (``data/errors.json``).

Each corpus entry has a regex for the message, the ONNX pattern behind it and the fix. A log
usually holds one real error among noise: the INT64 cast-down warning, "Network must have at least
one output" after a failed parse, and "No importer registered for op: X. Attempting to import as
plugin." INFO lines that are harmless when the plugin is then found. So matches are ranked:
op-specific entries, then the generic plugin-fallback entry, then noise entries.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from graphfix import passes
from graphfix.trt import support

NOISE = {"int64-weights-cast-down", "network-has-no-output"}
GENERIC = {"unsupported-op-plugin-fallback-generic"}
_PLUGIN_MISSING = re.compile(r"Plugin not found|could not find plugin|Cannot find plugin|getPluginCreator could not find", re.I)
_PLUGIN_ATTEMPT = re.compile(r"Attempting to import as plugin")
_NODE_PATTERNS = [
    re.compile(r"In node -?\d+ with name: (?P<node>\S+?) and operator: (?P<op>\w+)"),
    re.compile(r"node name: (?P<node>[^\s,)]+)"),
    re.compile(r"Invalid Node - (?P<node>\S+)"),
    re.compile(r"\bnode (?P<node>[/\w.:-]+) \(import(?P<op>\w+)\)"),
    re.compile(r"In node -?\d+ \(import(?P<op>\w+)\)"),
    re.compile(r"In function import(?P<op>\w+)"),
]


@dataclass
class ErrorMatch:
    id: str
    op: str
    node: str | None
    cause: str
    fix: str
    fix_pass: str | None
    line: str
    rank: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@cache
def _compiled() -> list[tuple[dict[str, Any], re.Pattern[str]]]:
    return [(e, re.compile(e["message_regex"])) for e in support.errors()]


def _fixing_pass(error_id: str, op: str | None = None) -> str | None:
    """The pass that fixes this error; where one entry covers several ops (decomposable-op-missing)
    and the log names the op, the pass that rewrites that op, or None if no pass does."""
    fixing = [p for p in passes.all_passes() if error_id in p.fixes]
    if op is None:
        return fixing[0].name if fixing else None
    return next((p.name for p in fixing if op in p.ops), None)


def _line_at(text: str, start: int, end: int) -> str:
    lo = text.rfind("\n", 0, start) + 1
    hi = text.find("\n", end)
    return text[lo : hi if hi >= 0 else len(text)].strip()


def _node_near(text: str, start: int) -> tuple[str | None, str | None]:
    """The node (and op) named on the match's line or the few lines before it."""
    window = text[max(0, text.rfind("\n", 0, max(0, start - 400)) + 1) : text.find("\n", start) if text.find("\n", start) >= 0 else len(text)]
    node = op = None
    for pattern in _NODE_PATTERNS:
        for m in pattern.finditer(window):
            node = node or m.groupdict().get("node")
            op = op or m.groupdict().get("op")
    return node, op


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]


def match_log(text: str) -> list[ErrorMatch]:
    """Every corpus entry the log matches, best explanation first."""
    plugin_missing = bool(_PLUGIN_MISSING.search(text))
    found: list[tuple[int, int, ErrorMatch]] = []
    for entry, regex in _compiled():
        m = regex.search(text)
        if m is None:
            continue
        line = _line_at(text, m.start(), m.end())
        if _PLUGIN_ATTEMPT.search(line) and not plugin_missing and not line.lstrip().startswith("[8]"):
            continue  # an INFO line; the plugin may well have been found
        groups = {k: v for k, v in m.groupdict().items() if v}
        node, op = _node_near(text, m.start())
        rank = 2 if entry["id"] in NOISE else 1 if entry["id"] in GENERIC else 0
        logged_op = groups.get("op") or groups.get("op2")  # the op the message itself names
        found.append((rank, m.start(), ErrorMatch(
            id=entry["id"], op=logged_op or op or entry["onnx_op"], node=node,
            cause=_first_sentence(entry["pattern"]), fix=entry["fix"], fix_pass=_fixing_pass(entry["id"], logged_op),
            line=line, rank=rank,
        )))
    found.sort(key=lambda item: (item[0], item[1]))
    best = found[0][0] if found else 0
    return [m for rank, _, m in found if rank == best or rank < 2]
