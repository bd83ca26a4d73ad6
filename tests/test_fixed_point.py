"""Output the target accepts, to a fixed point: on every fixture, graphfix run on its own output
with the same options changes nothing, and no pass leaves a blocking finding the input did not have."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import graphfix
from fixtures.make_fixtures import all_fixtures, path_of
from graphfix.trt.check import BLOCKING, check_model

ROOT = Path(__file__).resolve().parent.parent
MODELS = [(f"{g}/{fx.name}", path_of(g, fx)) for g, fx in all_fixtures()]
MODELS += [(f"real/{p.stem}", p) for p in sorted((ROOT / "fixtures" / "real").glob("*.onnx"))]
TARGETS = [None, "7.2", "8.2", "8.5", "10.1"]


def _nodes(model: onnx.ModelProto) -> list[tuple]:
    return [(n.op_type, tuple(n.input), tuple(n.output)) for n in model.graph.node]


@pytest.mark.parametrize("name,path", MODELS, ids=[m[0] for m in MODELS])
def test_second_run_changes_nothing_and_no_pass_adds_a_blocker(name, path):
    model = onnx.load(str(path))
    for trt in TARGETS:
        options = {"passes": "all"} if trt is None else {"passes": "auto", "trt": trt}
        first = graphfix.fix(model, verify=False, **options)
        second = graphfix.fix(first.model, verify=False, **options)
        kept = [(r.name, r.rewritten) for r in second.report.passes if r.rewritten > r.rolled_back_nodes]
        assert kept == [], trt
        assert _nodes(second.model) == _nodes(first.model), trt
        if trt is not None:
            blocking = [f for f in check_model(model, trt).findings if f.severity == BLOCKING]
            before = {(f.node, f.message) for f in blocking}
            new = [f for f in first.report.blocking_left if (f["node"], f["message"]) not in before
                   and not (f["error_id"] == DATA_SHAPE and f["node"] in {b.node for b in blocking})]
            assert new == [], trt


#: A node already blocked that reads a shape tensor computed from data (no exact rewrite) may be
#: described anew: passes on the way change where the path starts (Mask R-CNN at 7.2, whose
#: ScatterElements and Slice axes are rewritten) or lift the finding that hid it.
DATA_SHAPE = "layer-cannot-compute-shape-tensor"
