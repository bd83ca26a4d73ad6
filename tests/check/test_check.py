"""`graphfix check` on fixtures per TensorRT version, `--passes auto`, and the CLI."""

from __future__ import annotations

import json

import onnx
import pytest

import graphfix
from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import inp, model, node, out
from graphfix.check.findings import check_model, passes_for
from graphfix.cli.main import main
from graphfix.onnxio.load import load_model
from graphfix.trt.versions import TrtVersion

FIX = {fx.name: (group, fx) for group, fx in all_fixtures()}


def _path(name: str) -> str:
    group, fx = FIX[name]
    from fixtures.make_fixtures import path_of

    return str(path_of(group, fx))


def _blocking(name: str, trt: str) -> list:
    return [f for f in check_model(load_model(_path(name)), trt).findings if f.severity == "blocking"]


def _ops(findings) -> set[str]:
    return {f.op for f in findings}


@pytest.mark.parametrize("name,trt,blocked_op,fix", [
    ("clip_shape_max_static", "7.2", "Clip", "fold-clip"),
    ("clip_shape_max_static", "8.0", "Clip", "fold-clip"),
    ("superglue_attention", "8.0", "Einsum", "einsum-to-matmul"),
    ("lightglue_ellipsis", "8.6", "Einsum", "einsum-to-matmul"),
    ("layer_norm_opset17", "8.5", "LayerNormalization", "layernorm-decompose"),
    ("grid_sample_opset16", "8.4", "GridSample", "gridsample-decompose"),
    ("reflection_pad2d", "7.2", "Pad", "pad-to-concat"),
    ("circular_pad", "9.3", "Pad", "pad-to-concat"),
    ("exclusive_reverse", "10.8", "CumSum", "cumsum-decompose"),
    ("bert_mask_gather", "8.4", "Gather", "bool-gather-cast"),
    ("topk_ids_into_int64", "8.6", "ScatterND", "scatternd-cast"),
    ("kv_cache_reduction_none", "10.1", "ScatterND", "scatternd-cast"),
])
def test_blocking_findings(name, trt, blocked_op, fix):
    found = [f for f in _blocking(name, trt) if f.op == blocked_op]
    assert found, check_model(load_model(_path(name)), trt).as_dict()
    assert found[0].fix_pass == fix
    assert found[0].error_id is None or found[0].error_text


@pytest.mark.parametrize("name,trt,op", [
    ("clip_shape_max_static", "8.6", "Clip"),
    ("superglue_attention", "8.2", "Einsum"),
    ("superglue_attention", "10.1", "Einsum"),
    ("layer_norm_opset17", "8.6", "LayerNormalization"),
    ("reflection_pad2d", "8.6", "Pad"),
    ("circular_pad", "10.1", "Pad"),
    ("exclusive_reverse", "8.6", "CumSum"),
    ("bert_mask_gather", "8.5", "Gather"),
    ("topk_ids_into_int64", "9.0", "ScatterND"),
    ("kv_cache_reduction_none", "10.12", "ScatterND"),
])
def test_accepted_patterns_have_no_blocking_finding(name, trt, op):
    assert op not in _ops(_blocking(name, trt))


@pytest.mark.parametrize("trt", ["7.2", "8.0", "8.4", "8.6", "10.1", "11.1"])
def test_argmax_range_is_blocking_everywhere_with_the_path(trt):
    """Blocking on every release; before 8.5 (no NonZero) no pass fixes it and the path is named,
    from 8.5 range-bound rebuilds it (ArgMax over 12 values + 1 is at most 12)."""
    found = [f for f in _blocking("arange_over_argmax", trt) if f.error_id == "layer-cannot-compute-shape-tensor"]
    assert found and "ITopKLayer" in found[0].message
    if TrtVersion(trt) < TrtVersion("8.5"):
        assert found[0].path == ["/ArgMax", "/Add", "/Range"] and found[0].fix_pass is None
    else:
        assert found[0].fix_pass == "range-bound"


def test_opset_newer_than_parser_is_a_warning(tmp_path):
    """The parser only logs a warning for a newer opset; an opset-20 export with nothing else wrong passes."""
    report = check_model(FIX["clip_int"][1].build(), "8.2")
    assert any("opset 17 is newer" in f.message and f.severity == "warning" and f.rule == "opset" for f in report.findings)
    assert not any("opset" in f.message for f in _blocking("clip_int", "8.2"))
    m = model([node("Relu", ["x"], ["y"])], [inp("x", 1, [2])], [out("y", 1, [2])], opset=20)
    r = check_model(m, "8.0")
    assert not r.blocking and r.findings[0].severity == "warning"
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    assert main(["check", str(path), "--trt", "8.0"]) == 0


AUTO = [name for name, (group, fx) in FIX.items() if fx.passes and not fx.finding]


@pytest.mark.parametrize("trt", ["8.6", "10.1"])
@pytest.mark.parametrize("name", AUTO)
def test_auto_clears_every_fixable_finding(name, trt):
    group, fx = FIX[name]
    before = check_model(fx.build(), trt)
    result = graphfix.fix(fx.build(), "auto", trt=trt, input_shapes=fx.input_shapes, val_range=fx.val_range)
    assert [p.name for p in result.report.passes] == passes_for(before)
    assert all(p.verdict in ("kept", "unchanged") for p in result.report.passes), [p.reason for p in result.report.passes]
    after = check_model(result.model, trt)
    assert not [f for f in after.findings if f.severity == "blocking" and f.fix_pass], after.as_dict()
    assert result.report.trt["after"]["blocking"] == after.blocking
    # the summary checks the fixed graph in place: it says what checking the written model says
    key = ("node", "op", "severity", "message", "rule", "fix_pass")
    in_place = sorted(tuple(f[k] for k in key) for f in result.report.trt["after"]["findings"])
    assert in_place == sorted(tuple(f[k] for k in key) for f in after.as_dict()["findings"])


def test_cli_table_json_and_exit_codes(capsys):
    assert main(["check", _path("clip_shape_max_static"), "--trt", "8.0"]) == 1
    text = capsys.readouterr().out
    assert "/ClipBoxes" in text and "fold-clip" in text and "must be an initializer" in text and "BLOCKING" in text
    assert main(["check", _path("clip_shape_max_static"), "--trt", "8.6"]) == 0
    assert "no findings" in capsys.readouterr().out
    assert main(["check", _path("arange_over_argmax"), "--trt", "8.4.1", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["version_used"] == "8.4" and "8.4.1" in data["note"] and data["blocking"]
    assert data["findings"][-1]["remedy"].startswith("no rewrite: compute it from shapes or constants")  # and what to change


def test_cli_bad_version(capsys):
    assert main(["check", _path("clip_int"), "--trt", "banana"]) == 2
    assert "not a TensorRT version" in capsys.readouterr().err


def _repeated_blocks(n: int, bound_type: int = onnx.TensorProto.DOUBLE) -> onnx.ModelProto:
    """An export repeating one block: Relu -> Clip with a computed (Constant -> Cast) bound."""
    import numpy as np

    from fixtures.recipes._onnx import const

    nodes, x = [], "x"
    dtype = onnx.helper.tensor_dtype_to_np_dtype(bound_type)
    for k in range(n):
        nodes += [node("Relu", [x], [f"r{k}"], name=f"/b{k}/Relu"), const(f"lo{k}", np.asarray(0.5, dtype)),
                  node("Cast", [f"lo{k}"], [f"lof{k}"], name=f"/b{k}/Cast", to=onnx.TensorProto.FLOAT),
                  node("Clip", [f"r{k}", f"lof{k}"], [f"y{k}"], name=f"/b{k}/Clip")]
        x = f"y{k}"
    return model(nodes, [inp("x", onnx.TensorProto.FLOAT, [2, 3])], [out(x, onnx.TensorProto.FLOAT, [2, 3])])


def test_repeated_findings_are_said_once_with_the_other_nodes_named(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_repeated_blocks(9), path)
    assert main(["check", str(path), "--trt", "7.2"]) == 1
    text = capsys.readouterr().out
    assert text.count("Clip min/max must be an initializer") == 1
    assert "and 8 more like it: /b1/Clip, /b2/Clip, /b3/Clip, /b4/Clip, /b5/Clip, … (3 more); --json lists every node" in text
    assert "9 blocking" in text
    assert main(["check", str(path), "--trt", "7.2", "--json"]) == 1
    assert len([f for f in json.loads(capsys.readouterr().out)["findings"] if f["op"] == "Clip"]) == 9


def test_double_weights_are_not_a_type_finding_and_no_other_ops_error_is_quoted():
    report = check_model(_repeated_blocks(2), "8.6")
    assert not [f for f in report.findings if f.op == "Cast"]  # DOUBLE Constant values are cast down at import
    computed = model([node("Cast", ["x"], ["d"], to=onnx.TensorProto.DOUBLE), node("Neg", ["d"], ["y"])],
                     [inp("x", onnx.TensorProto.FLOAT, [2])], [out("y", onnx.TensorProto.DOUBLE, [2])])
    neg = [f for f in check_model(computed, "8.6").findings if f.op == "Neg"]
    assert neg and "DOUBLE" in neg[0].message
    assert neg[0].error_text is None or "Neg" in neg[0].error_text  # not the Gather BOOL assertion


def test_roialign_without_importer_says_what_to_change_upstream():
    from pathlib import Path

    rcnn = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "fasterrcnn_transform_rpn.onnx"
    found = [f for f in check_model(onnx.load(str(rcnn)), "8.2").findings if f.op == "RoiAlign"]
    assert found and all(f.severity == "blocking" and "plugin" in f.message and "outside the engine" in f.message for f in found)
    assert not [f for f in check_model(onnx.load(str(rcnn)), "8.5").findings if f.op == "RoiAlign" and f.severity == "blocking"]


def test_quoted_tensorrt_messages_carry_no_log_timestamps():
    """The errors corpus quotes real logs ("[11/21/2023-08:18:18] [I] [TRT] ...", "[2020-02-04 11:50:49   ERROR]"):
    the check quotes TensorRT's words only."""
    import re
    from pathlib import Path

    import onnx

    root = Path(__file__).resolve().parents[2]
    for path in [root / "fixtures" / "real" / "swin_dynamic_hw.onnx", root / "fixtures" / "shape_tensor_ops" / "vit_pad_to_patch.onnx"]:
        texts = [f.error_text for f in check_model(onnx.load(str(path)), "8.2").findings if f.error_text]
        assert texts
        assert not [t for t in texts if re.search(r"\[\d\d/\d\d/\d{4}|\d{4}-\d\d-\d\d|\[TRT\]|\[[EWI]\]", t)], texts
