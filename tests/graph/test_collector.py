"""Loading's walk, the import and the export run without garbage collection (they make objects
and free few: a collection only rescans them); the collector is back as the caller had it."""

from __future__ import annotations

import gc

import onnx

from graphfix.graph import convert
from graphfix.graph.convert import to_graph, to_parts
from graphfix.onnxio import validate
from graphfix.onnxio.collector import collector_off
from graphfix.onnxio.load import load_model
from tests.helpers.cli_runs import ROOT

MODEL = ROOT / "fixtures" / "fold_clip" / "superpoint_descriptor_norm.onnx"


def test_load_walk_and_export_run_with_the_collector_off(monkeypatch):
    seen = {}
    walk, export = validate._graph_problem, convert._export_reusing
    monkeypatch.setattr(validate, "_graph_problem", lambda *a, **k: (seen.setdefault("walk", gc.isenabled()), walk(*a, **k))[1])
    monkeypatch.setattr(convert, "_export_reusing", lambda *a: (seen.setdefault("export", gc.isenabled()), export(*a))[1])
    model = load_model(MODEL)
    to_parts(to_graph(model), model)
    assert seen == {"walk": False, "export": False} and gc.isenabled()


def test_collector_off_keeps_a_callers_choice_and_freezes_on_request():
    gc.disable()
    try:
        with collector_off():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    before = gc.get_freeze_count()
    with collector_off(freeze=True):
        kept = [onnx.TensorProto() for _ in range(3)]  # noqa: F841 - alive when frozen
    assert gc.get_freeze_count() > before and gc.isenabled()
    gc.unfreeze()
