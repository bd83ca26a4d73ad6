"""The pass manager runs each pass with the garbage collector paused and freezes what the pass
made (as the import is frozen), leaves the collector as the caller had it, also when a pass raises."""

from __future__ import annotations

import gc

import pytest

from graphfix import passes as registry
from graphfix.graph import to_graph
from graphfix.graph.edits import EditLog
from graphfix.passes.base import NO_IMPORTER, Pass, Rule
from graphfix.pipeline.manager import run_passes
from graphfix.pipeline.settings import Settings
from graphfix.report.model import ERROR, Report
from tests.helpers.models import weight_chain


def _run(chosen: list[Pass]) -> Report:
    report = Report(None, None, {})
    run_passes(to_graph(weight_chain(3, 4)), chosen, Settings(), EditLog(), report, lambda what: None)
    return report


@pytest.fixture
def collector_restored():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()  # run_passes' caller unfreezes (pipeline.run does at the end of a run)
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_objects_a_pass_makes_are_frozen_and_the_collector_is_back_on(collector_restored):
    gc.enable()
    gc.unfreeze()
    report = _run([registry.get("fold-clip")])
    assert report.passes[0].rewritten == 3
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0


def test_collector_a_caller_turned_off_stays_off_and_nothing_is_frozen(collector_restored):
    gc.unfreeze()
    gc.disable()
    report = _run([registry.get("fold-clip")])
    assert report.passes[0].rewritten == 3
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0


def _raises(node, ctx) -> None:
    raise RuntimeError("a buggy rewrite")


BUGGY = Pass("buggy-clip", "raises on every Clip", frozenset({"Clip"}),
             (Rule(NO_IMPORTER, "all", "every Clip"),), _raises)


def test_collector_is_back_on_after_a_pass_raises(collector_restored):
    gc.enable()
    report = _run([BUGGY])
    assert report.passes[0].verdict == ERROR
    assert gc.isenabled()
