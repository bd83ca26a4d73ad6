"""Bounds and escaping for text in reports: long names cut, Markdown special characters escaped.
"""

from __future__ import annotations

import re

from graphfix.errors import cut, visible

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
