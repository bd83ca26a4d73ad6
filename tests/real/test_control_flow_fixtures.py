"""Issue 34's first promise on every fixture file with If/Loop/Scan bodies (exports of real model
code: optimum's merged Whisper decoder, TorchScript's voice-activity detector, tf2onnx's while_loop
and map_fn, jax2onnx's scanned RNN, spox's stateless Scan, torchvision's detectors, ...): ``--passes auto --trt 8.5``
leaves no node inside any body that a pass would rewrite, keeps every rewrite (parity: nothing
rolled back, the end-to-end comparison passed), writes a model onnx's strict shape inference
accepts whenever it accepted the input, and a second run changes nothing.

Before issue 34's work a merged decoder's rewritten branches failed strict inference ("Range:
limit has inconsistent type") and layernorm-decompose was rolled back, leaving 14 findings in the
If's branches (exit 4)."""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path

import onnx
import pytest

import graphfix
from graphfix import passes
from graphfix.check.findings import check_model
from tests.helpers.control_flow import matches, strictly_inferred

ROOT = Path(__file__).resolve().parents[2]
TRT = "8.5"
MEMORY = 8 << 30  # models we did not write: capped (the onnxruntime worker inherits the limit)


def _has_bodies(graph: onnx.GraphProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in graph.node for a in n.attribute)


BODIED = [p for p in sorted(ROOT.glob("fixtures/*/*.onnx")) if _has_bodies(onnx.load(str(p), load_external_data=False).graph)]
#: Found by the walk above; listed so that losing one (or its bodies) fails.
EXPECTED = {"jax2onnx_scan_rnn_op23", "tf2onnx_while_loop_op13", "tf2onnx_map_fn_op13", "optimum_whisper_decoder_merged",
            "torchscript_vad_sr_switch", "fasterrcnn_op11", "fasterrcnn_transform_rpn", "maskrcnn_paste_masks",
            "ssdlite_op11", "vitmatte_like", "scatter_reduce_amax", "legacy_rank_test", "squeeze_static_dim",
            "spox_scan_map"}


#: Declared shapes the model contradicts: strict inference accepts the input only because it cannot
#: see through an If; once if-inline removes that If (exact, verified), it sees the contradiction.
STALE_SHAPES = {"scatter_reduce_amax": "the export declares [24] for the second If's branch outputs and the graph output, "
                                       "which the model computes as [3, 8] (fixtures/real/README.md)"}


def _param(path: Path):
    return pytest.param(path, id=path.stem)


@contextlib.contextmanager
def _capped():
    """This process's address space limited while a model we did not write runs (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY if hard == resource.RLIM_INFINITY else min(MEMORY, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_the_fixtures_with_bodies_are_all_here():
    assert {p.stem for p in BODIED} >= EXPECTED, sorted(EXPECTED - {p.stem for p in BODIED})


def _left_in_bodies(model: onnx.ModelProto) -> list[str]:
    """Nodes inside a body that a pass would rewrite at ``TRT``: by every pass's matcher, and as
    ``check`` reports them (a finding with a path, which a pass claims)."""
    left = [f"{p.name}: {n}" for p in passes.all_passes() for n in matches(model, p.name, TRT, bodies=True)]
    left += [f"check: {'/'.join(f.path)} ({f.fix_pass})" for f in check_model(model, TRT).findings if f.fix_pass and f.path]
    return left


def _strict(model: onnx.ModelProto) -> bool:
    try:
        strictly_inferred(model)
    except Exception:  # noqa: BLE001 - onnx's inference or checker refuses it: nothing to keep
        return False
    return True


@pytest.mark.parametrize("path", [_param(p) for p in BODIED])
def test_auto_leaves_no_rewritable_node_in_any_body_with_parity_and_a_second_run_changes_nothing(path):
    original = onnx.load(str(path))
    with _capped():
        result = graphfix.fix(original, "auto", trt=TRT)
        again = graphfix.fix(result.model, "auto", trt=TRT)
    assert result.report.status in ("ok", "blocked"), [(p.name, p.reason) for p in result.report.passes if p.reason]
    assert [(p.name, p.reason) for p in result.report.passes if p.verdict == "rolled-back" or p.rolled_back_nodes] == []
    assert all(d["passed"] for d in result.report.final.values()), result.report.final
    assert _left_in_bodies(result.model) == []
    if path.stem not in STALE_SHAPES and _strict(original):  # what strict inference accepted before, it accepts after
        strictly_inferred(result.model)
    assert [(p.name, p.rewritten) for p in again.report.passes if p.rewritten] == []
    assert again.model.SerializeToString() == result.model.SerializeToString()


def test_a_rewritten_scan_body_is_verified_by_the_probe_run():
    """spox_scan_map: scan-normalize, layernorm-decompose and castlike-to-cast rewrite the Scan and
    its body; the region (the Scan) is compared in the one probe run, not pass by pass."""
    result = graphfix.fix(onnx.load(str(ROOT / "fixtures" / "real" / "spox_scan_map.onnx")), "auto", trt=TRT)
    assert [n for n in result.report.notes if "probe model could not run" in n] == []
