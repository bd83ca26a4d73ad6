"""Rollback cannot corrupt: undoing any set of verified regions (what node-level rollback does),
with or without an export in between (what --verify-each does), leaves a graph that passes the
checker, runs in onnxruntime where the original runs, and on which every pass still runs."""

from __future__ import annotations

import gc
import random
from collections import Counter
from pathlib import Path

import onnx
import pytest

from fixtures.make_fixtures import all_fixtures, path_of
from graphfix import passes as registry
from graphfix.graph import to_graph, to_model
from graphfix.graph.edits import EditLog
from graphfix.onnxio.ir import runtime_compatible
from graphfix.onnxio.validate import checker_problem, declared_shapes, relaxed_problem
from graphfix.pipeline.manager import run_passes
from graphfix.pipeline.settings import Settings
from graphfix.report.model import Report
from graphfix.verify import regions as regions_mod
from graphfix.verify.inputs import make_inputs
from tests.helpers.support import ort_run

REAL = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "real").glob("*.onnx"))
MODELS = [(f"{g}/{fx.name}", path_of(g, fx), dict(fx.input_shapes)) for g, fx in all_fixtures()]
MODELS += [(f"real/{p.stem}", p, {}) for p in REAL]


def _all_passes(graph, log: EditLog) -> None:
    run_passes(graph, registry.select("all", ()), Settings(), log, Report(None, None, {}), lambda what: None)
    gc.unfreeze()  # the passes' objects are frozen: their caller unfreezes (pipeline.run does)


def _feeds(model: onnx.ModelProto, shapes):
    try:
        feeds = make_inputs(model, shapes, seed=2)[0]
        ort_run(model, feeds)
    except Exception:  # noqa: BLE001 - not runnable at these shapes: checked by the checker only
        return None
    return feeds


@pytest.mark.parametrize("name,path,shapes", MODELS, ids=[m[0] for m in MODELS])
def test_undoing_any_regions_leaves_a_sound_graph(name, path, shapes):
    model = onnx.load(str(path))
    feeds = _feeds(model, shapes)
    for seed in range(4):
        rng = random.Random(seed)
        graph, log = to_graph(model), EditLog()
        _all_passes(graph, log)
        if not log.edits:
            pytest.skip("no pass rewrites this model")
        if seed % 2:
            to_model(graph, model)  # --verify-each exports between the passes (and prunes the graph)
        regs = regions_mod.regions(log.edits, graph, regions_mod.original_names(model))
        undo = [r for r in regs if rng.random() < 0.5] if seed < 2 else regs
        for r in undo:
            r.undo()
        undone = to_model(graph, model)
        problem = checker_problem(runtime_compatible(undone), True)
        if problem:  # only the input's own declared shapes may disagree (scatter_reduce's If branches)
            assert relaxed_problem(runtime_compatible(undone), declared_shapes(model)) is None, (seed, len(undo), problem)
        if feeds is not None:
            ort_run(undone, feeds)
        if len(undo) == len(regs):  # everything undone: the original graph again
            assert Counter(n.op_type for n in undone.graph.node) == Counter(n.op_type for n in model.graph.node)
        _all_passes(to_graph(undone), EditLog())  # later passes still run on it
