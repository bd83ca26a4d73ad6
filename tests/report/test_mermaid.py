"""Every Mermaid diagram graphfix writes parses with mermaid's own parser (npm ``mermaid`` under
node), the one GitHub, GitLab and the HTML report render with: a string comparison cannot tell
whether mermaid accepts a label, and one bad label blanks the whole diagram.

The node project is ``tests/report/mermaid`` (package.json, lockfile, parse.mjs), installed once by
``tests/helpers/node_projects.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from graphfix.cli.main import main
from graphfix.report.diagram import mermaid_node
from tests.helpers.node_projects import installed, run_json

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "report" / "mermaid"
FILES = ("package.json", "package-lock.json", "parse.mjs")

#: The demo and fixtures whose rewrites cover ops, constants, subgraphs and multi-node regions.
FIXTURES = [
    "demo/superglue_matcher.onnx",
    "gridsample_decompose/superpoint_sample_descriptors.onnx",
    "if_inline/legacy_rank_test.onnx",
    "layernorm_decompose/bert_self_output.onnx",
    "pad_to_concat/circular_pad.onnx",
]

MermaidParse = Callable[[list[str]], list[str | None]]


@pytest.fixture(scope="session")
def mermaid_parse() -> MermaidParse:
    """Parse diagrams with mermaid; per diagram None (accepted) or mermaid's error message."""
    project = installed("mermaid", FILES)

    def parse(diagrams: list[str]) -> list[str | None]:
        return run_json(project / "parse.mjs", diagrams)

    return parse


def _written_diagrams(fixture: str, tmp: Path) -> list[str]:
    """The diagrams of one run: those in the Markdown report and those in the JSON report."""
    assert main([str(ROOT / "fixtures" / fixture), str(tmp / "fixed.onnx"), "--passes", "all",
                 "--report", str(tmp / "r.json"), "--report", str(tmp / "r.md"), "--quiet"]) == 0
    in_json = [n["diagram"] for n in json.loads((tmp / "r.json").read_text())["nodes"] if n.get("diagram")]
    in_markdown = re.findall(r"^```mermaid\n(.*?)^```$", (tmp / "r.md").read_text(), re.M | re.S)
    assert in_json and in_markdown, f"{fixture}: no diagram written"
    return in_json + [d.rstrip("\n") for d in in_markdown]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_report_diagrams_parse(fixture, mermaid_parse, tmp_path):
    diagrams = _written_diagrams(fixture, tmp_path)
    errors = {d: e for d, e in zip(diagrams, mermaid_parse(diagrams), strict=True) if e}
    assert not errors, "\n\n".join(f"{d}\n--> {e}" for d, e in errors.items())


def test_labels_with_any_characters_parse(mermaid_parse):
    """Tensor and node names are free text: quotes, brackets, entities, HTML, a Markdown backtick,
    mermaid keywords."""
    names = ['a"b', "x[0]:(1)", "#quot; & #35;", "<unk>", "`md`", "end", "a --> b", 'say "end"', "{}|;%%"]
    diagrams = ["flowchart LR\n  " + mermaid_node("n", name, shape) for name in names for shape in ("op", "tensor", "constant")]
    assert mermaid_parse(diagrams) == [None] * len(diagrams)
    # the parser is not lenient: the unescaped form of a quote is refused
    assert mermaid_parse(['flowchart LR\n  n(["a"b"])'])[0]
