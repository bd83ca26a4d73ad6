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
from graphfix.passes.base import NO_IMPORTER
from graphfix.trt import support

NOISE = {"int64-weights-cast-down", "network-has-no-output"}
#: The plugin errors (no importer, the plugin lookup fails): the op the log names decides the pass.
GENERIC = {"unsupported-op-plugin-fallback-generic", "custom-domain-op-plugin-library-missing"}
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


#: The op a plugin lookup is for, as the parser logs it (ModelImporter.cpp and the fallback
#: plugin importer, onnx-tensorrt 8.5-GA to 10.1-GA) or TensorRT's plugin registry does.
_PLUGIN_OP = re.compile(r"No importer registered for op: (?P<op>\w+)|Searching for plugin: (?P<op2>\w+)|"
                        r"(?:getPluginCreator could not find plugin|Cannot find plugin):?\s*(?P<op3>\w+)")
#: Importer functions named in "In function importX:" lines that are not ONNX ops.
_NOT_OPS = frozenset({"FallbackPluginImporter", "LocalFunctionImporter"})
#: The domain in TensorRT 8.x's dump of the failing NodeProto.
_PROTO_DOMAIN = re.compile(r'^domain: "(?P<domain>[^"]*)"\s*$')


#: TensorRT 8.x prints the node it failed on before the error: 'While parsing node number 14
#: [Pad -> "onnx::Pad_39"]:', then the NodeProto between Begin/End node lines (its ``name:``).
_PARSING = re.compile(r'While parsing node number (?P<number>\d+) \[(?P<op>\w+) -> "(?P<output>[^"]*)"\]:')
_PROTO_NAME = re.compile(r'^name: "(?P<node>[^"]*)"\s*$')
#: What precedes a message on a log line: timestamps, severity tags, "[TRT]".
_PREFIX = re.compile(r"^(?:\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\]|\[\d{4}-\d\d-\d\d[ T][\d:.,]+\s+[A-Z]+\]|"
                     r"\d{4}-\d\d-\d\d[ T][\d:.,]+|\[[EWIVF]\]|\[TRT\]|&&&&)\s*")
#: Quoted log text longer than this is shortened at a sentence end.
QUOTE_CHARS = 500


@dataclass
class ErrorMatch:
    id: str
    op: str
    node: str | None
    cause: str
    fix: str
    fix_pass: str | None
    #: the TensorRT message, without the log's timestamps and tags
    line: str
    rank: int
    #: the failing node's first output, from TensorRT 8.x's 'While parsing node number' block
    output: str | None = None
    #: every pass that fixes this error where the log does not say which (the If errors: if-inline
    #: for a condition that folds, if-rank-unify for a rank a reader ignores), fix_pass first
    fix_passes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@cache
def _compiled() -> list[tuple[dict[str, Any], re.Pattern[str]]]:
    return [(e, re.compile(e["message_regex"])) for e in support.errors()]


def _fixing_passes(error_id: str, op: str | None = None, domain: str | None = None) -> tuple[str, ...]:
    """Every pass that fixes this error (:func:`_fixing_pass` first): several only where the log's
    op does not narrow them down."""
    first = _fixing_pass(error_id, op, domain)
    if first is None or error_id in GENERIC:
        return () if first is None else (first,)
    everything = [p for p in passes.all_passes() if domain is None or domain in p.domains]
    return (first, *(p.name for p in everything if error_id in p.fixes and p.name != first and (op is None or op in p.ops)))


def _fixing_pass(error_id: str, op: str | None = None, domain: str | None = None) -> str | None:
    """The pass that fixes this error; where one entry covers several ops (decomposable-op-missing)
    and the log names the op, the pass that rewrites that op, or None if no pass does. The
    catch-all plugin error names a pass only for the op the log names: one that rewrites that op
    for a missing importer, never another op's. ``domain``: the failing node's, where the log's
    node dump says it (a pass rewrites its own domains' ops only: com.microsoft::Gelu is not Gelu)."""
    everything = [p for p in passes.all_passes() if domain is None or domain in p.domains]
    if error_id in GENERIC:
        if op is None:
            return None
        return next((p.name for p in everything if op in p.ops and any(r.kind == NO_IMPORTER for r in p.rules)), None)
    fixing = [p for p in everything if error_id in p.fixes]
    if op is None:
        return fixing[0].name if fixing else None
    return next((p.name for p in fixing if op in p.ops), None)


def _domain_of(blocks: list[_Parsing], op: str | None, at: int) -> str | None:
    """The domain TensorRT 8.x's node dump gives the node of ``op`` nearest the match."""
    dumped = [b for b in blocks if b.op == op and b.domain is not None]
    return min(dumped, key=lambda b: abs(b.start - at)).domain if dumped else None


def _plugin_op(text: str, before: int) -> str | None:
    """The op of the last plugin lookup the log names before ``before`` (else after it)."""
    found = list(_PLUGIN_OP.finditer(text))
    earlier = [m for m in found if m.start() < before]
    m = earlier[-1] if earlier else found[0] if found else None
    return None if m is None else next(v for v in m.groupdict().values() if v)


def _line_at(text: str, start: int, end: int) -> str:
    lo = text.rfind("\n", 0, start) + 1
    hi = text.find("\n", end)
    return text[lo : hi if hi >= 0 else len(text)].strip()


def _bare(line: str) -> str:
    """A log line without the timestamps and tags before its message (they are the log's, not
    TensorRT's words, and differ between every paste)."""
    line = line.strip()
    while (m := _PREFIX.match(line)) and m.end():
        line = line[m.end():]
    return line


def bare_text(text: str) -> str:
    """A quoted example without the log's timestamps and tags on any of its lines."""
    return " ".join(filter(None, map(_bare, text.splitlines())))


def quote(text: str, start: int, end: int) -> str:
    """The matched message as TensorRT wrote it: its line without timestamps, joined with the
    next line when it only introduces one ("In function importPad:" then "[8] Assertion failed:
    ..."), shortened only at a sentence end."""
    hi = text.find("\n", end)
    said = " ".join(filter(None, map(_bare, _line_at(text, start, end).splitlines())))
    rest = text[hi + 1:hi + 1 + QUOTE_CHARS].splitlines() if hi >= 0 else []
    while said.endswith(":") and rest:
        following = _bare(rest.pop(0))
        if following:
            said = f"{said} {following}"
    if len(said) <= QUOTE_CHARS:
        return said
    cut = max(said.rfind(stop, 0, QUOTE_CHARS) for stop in (". ", "! ", "? ", "; "))
    return said[:cut + 1] + " …" if cut > 0 else said[:said.rfind(" ", 0, QUOTE_CHARS)] + " …"


@dataclass
class _Parsing:
    start: int
    op: str
    output: str
    node: str | None
    domain: str | None = None


def _parsing_blocks(text: str) -> list[_Parsing]:
    """TensorRT 8.x's 'While parsing node number N [Op -> "out"]:' blocks, each with the node
    name from the NodeProto dump under it (the top-level ``name:`` line, before ``op_type:``;
    attributes' names come after it)."""
    blocks = []
    for m in _PARSING.finditer(text):
        node = domain = None
        named_part = True  # the node's own name: before op_type (attributes' names come after)
        for line in text[m.end():m.end() + 20_000].splitlines()[1:]:
            line = re.sub(r"^\S+\.(?:cpp|hpp):\d+:\s*", "", _bare(line))
            if line.startswith("--- End node") or "While parsing node number" in line:
                break
            if line.startswith("op_type:"):
                named_part = False
            elif named_part and node is None and (named := _PROTO_NAME.match(line)):
                node = named.group("node") or None
            elif dumped := _PROTO_DOMAIN.match(line):
                domain = dumped.group("domain")
        blocks.append(_Parsing(m.start(), m.group("op"), m.group("output"), node, domain))
    return blocks


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
    blocks = _parsing_blocks(text)
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
        op = None if op in _NOT_OPS else op
        block = next((b for b in reversed(blocks) if b.start < m.start()), None)
        if block is not None:  # the node TensorRT was parsing when it failed
            node, op = block.node or node, block.op
        rank = 2 if entry["id"] in NOISE else 1 if entry["id"] in GENERIC else 0
        logged_op = groups.get("op") or groups.get("op2")  # the op the message itself names
        if logged_op is None and entry["id"] in GENERIC:
            logged_op = op or _plugin_op(text, m.start())  # "Plugin not found": the lookup the log shows
        fixing = _fixing_passes(entry["id"], logged_op, _domain_of(blocks, logged_op or op or entry["onnx_op"], m.start()))
        found.append((rank, m.start(), ErrorMatch(
            id=entry["id"], op=logged_op or op or entry["onnx_op"], node=node,
            cause=_first_sentence(entry["pattern"]), fix=entry["fix"],
            fix_pass=fixing[0] if fixing else None, line=quote(text, m.start(), m.end()), rank=rank,
            output=block.output if block else None, fix_passes=fixing,
        )))
    found.sort(key=lambda item: (item[0], item[1]))
    best = found[0][0] if found else 0
    return [m for rank, _, m in found if rank == best or rank < 2]
