"""Every pass declares itself completely: name, order, summary, known error ids, a version range."""

from __future__ import annotations

import pytest

from graphfix import passes
from graphfix.trt import support
from graphfix.trt.versions import TrtVersion, VersionRange

IDS = {e["id"] for e in support.errors()}


@pytest.mark.parametrize("p", passes.all_passes(), ids=lambda p: p.name)
def test_pass_declaration(p):
    assert p.name and p.summary and p.problem and p.doc and p.ops
    assert set(p.fixes) <= IDS, set(p.fixes) - IDS
    VersionRange(p.needed_by)  # parses
    assert any(TrtVersion(v) in p.versions for v in support.versions())


def test_order_is_unique_and_names_are_kebab_case():
    all_p = passes.all_passes()
    assert len({p.order for p in all_p}) == len(all_p)
    assert all(p.name == p.name.lower() and " " not in p.name for p in all_p)


def test_version_ranges():
    r = VersionRange("<8.0 || >=10.8")
    assert "7.2" in r and "10.8" in r and "11.1" in r and "8.6" not in r
    assert "8.2-EA" in VersionRange(">=8.0,<8.2") and "8.2" not in VersionRange(">=8.0,<8.2")
    assert TrtVersion("7.2-ngc21.05") > TrtVersion("7.2") and TrtVersion("8.4.3") > TrtVersion("8.4")
