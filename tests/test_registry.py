"""Every pass declares itself completely, and its declared range is exactly where it fires.

A pass's ``needed_by`` is the union of its rules' ranges; ``match`` is "a rule holds for the
target". This test proves the two agree on real patterns: over every documented release, the
releases for which ``match`` fires on at least one node of the pass's fixtures are exactly the
releases in its declared range.
"""

from __future__ import annotations

import pytest

from fixtures.make_fixtures import all_fixtures
from graphfix import passes
from graphfix.graph import Builder, Folder, to_graph
from graphfix.graph.convert import all_graphs
from graphfix.passes.base import KINDS, Context
from graphfix.trt import support
from graphfix.trt.versions import TrtVersion, VersionRange

IDS = {e["id"] for e in support.errors()}
DOCUMENTED = [v for v in support.versions() if "-" not in v]


@pytest.mark.parametrize("p", passes.all_passes(), ids=lambda p: p.name)
def test_pass_declaration(p):
    assert p.name and p.summary and p.doc and p.ops and p.rules
    assert set(p.fixes) <= IDS, set(p.fixes) - IDS
    for rule in p.rules:
        assert rule.kind in KINDS and rule.message and rule.evidence, rule
        VersionRange(rule.versions)
    assert any(TrtVersion(v) in p.versions for v in support.versions())


def _fires(p, graphs, version: str) -> bool:
    for graph in graphs:
        for g in all_graphs(graph):
            g.opset = graph.opset
            ctx = Context(g, Builder(g), Folder(g), TrtVersion(version))
            if any(p.match(n, ctx) for n in g.nodes):
                return True
    return False


@pytest.mark.parametrize("p", passes.all_passes(), ids=lambda p: p.name)
def test_declared_range_is_where_match_fires_on_fixtures(p):
    graphs = [to_graph(fx.build()) for _, fx in all_fixtures() if p.name in fx.passes]
    assert graphs, f"{p.name} has no fixture"
    fires = {v for v in DOCUMENTED if _fires(p, graphs, v)}
    declared = {v for v in DOCUMENTED if TrtVersion(v) in p.versions}
    assert fires == declared, f"{p.name}: declared {p.needed_by}; fires but undeclared {sorted(fires - declared, key=TrtVersion)}, declared but never fires {sorted(declared - fires, key=TrtVersion)}"


def test_order_is_unique_and_names_are_kebab_case():
    all_p = passes.all_passes()
    assert len({p.order for p in all_p}) == len(all_p)
    assert all(p.name == p.name.lower() and " " not in p.name for p in all_p)


def test_version_ranges():
    r = VersionRange("<8.0 || >=10.8")
    assert "7.2" in r and "10.8" in r and "11.1" in r and "8.6" not in r
    assert "8.2-EA" in VersionRange(">=8.0,<8.2") and "8.2" not in VersionRange(">=8.0,<8.2")
    assert TrtVersion("7.2-ngc21.05") > TrtVersion("7.2") and TrtVersion("8.4.3") > TrtVersion("8.4")
    assert support.describe_range(VersionRange("<8.0 || >=10.8")) == "<8.0 || >=10.8"
    assert support.describe_range(VersionRange("all")) == "all"
