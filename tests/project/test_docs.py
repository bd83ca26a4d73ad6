"""The docs cannot drift: the pass reference is generated from the registry, links resolve."""

from __future__ import annotations

import re
from pathlib import Path

from graphfix.cli.passes import reference

ROOT = Path(__file__).resolve().parents[2]


def test_pass_reference_is_the_registry():
    written = (ROOT / "docs" / "passes.md").read_text()
    assert written == reference(), "docs/passes.md is stale: python -m graphfix passes --markdown > docs/passes.md"


def test_no_rule_text_keeps_an_unformatted_placeholder():
    """An evidence string missing its f prefix printed '{_ALL_BRANCHES}' in loop-iteration-without-trip-count."""
    assert re.findall(r"\{_?[A-Z][A-Z_]+\}", reference()) == []


def test_every_local_link_resolves():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(((?!https?:|#)[^)#\s]+)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
