"""Write a report in the format its suffix names: .json (with polygraphy side files), .md, .html.
"""

from __future__ import annotations

import json
import os

from graphfix.fs.transaction import write_atomic
from graphfix.report.html import page
from graphfix.report.markdown import markdown
from graphfix.report.model import Report


# --------------------------------------------------------------------- files
def write(report: Report, path: str | os.PathLike) -> None:
    """``.md`` writes Markdown, ``.html`` one self-contained page, anything else JSON (atomically)."""
    suffix = os.path.splitext(str(path))[1]
    if suffix == ".html":

        text = page(report)
    else:
        text = markdown(report) if suffix == ".md" else json.dumps(report.as_dict(), indent=2) + "\n"
    write_atomic(path, text.encode(), "report")
