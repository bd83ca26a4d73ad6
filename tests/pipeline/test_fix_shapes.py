"""--fix-shapes: input dims frozen, the shape arithmetic that becomes constant folded, verified."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import graphfix
from graphfix.check.findings import check_model
from graphfix.cli.main import main
from graphfix.pipeline import fix_shapes

ROOT = Path(__file__).resolve().parents[2]
TOPK = ROOT / "fixtures" / "fold_weights" / "topk_min_shape.onnx"
SWIN = ROOT / "fixtures" / "real" / "swin_dynamic_hw.onnx"


def _dims(model: onnx.ModelProto) -> dict[str, list]:
    return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}


def test_computed_topk_k_folds_away_and_the_dims_are_frozen():
    """torchvision's min(pre_nms_top_n, num_anchors) K: a constant once the input size is fixed."""
    result = graphfix.fix(str(TOPK), "auto", trt="8.2", fix_shapes={"scores": (1, 50)})
    record = result.report.passes[0]
    assert record.name == "fix-shapes" and record.verdict == "kept"
    assert all(d["passed"] for d in record.outputs.values())
    assert [n.op_type for n in result.model.graph.node] == ["TopK"]
    assert _dims(result.model) == {"scores": [1, 50]}
    assert not check_model(result.model, "8.2").blocking


def test_swin_window_arithmetic_folds_at_a_fixed_size():
    dynamic = graphfix.fix(str(SWIN), "auto", trt="8.2", verify=False)
    frozen = graphfix.fix(str(SWIN), "auto", trt="8.2", fix_shapes={"pixel_values": (1, 3, 224, 224)})
    assert frozen.report.passes[0].verdict == "kept"
    assert len(frozen.model.graph.node) < len(dynamic.model.graph.node) - 500
    assert "mod-decompose" not in [p.name for p in frozen.report.passes]  # the window Mods folded
    assert frozen.report.status == "ok"


def test_a_frozen_model_that_differs_is_rolled_back(monkeypatch):
    real = fix_shapes.freeze

    def wrong(model, shapes):
        frozen, gone = real(model, shapes)
        for t in frozen.graph.initializer:
            if t.data_type == onnx.TensorProto.INT64 and onnx.numpy_helper.to_array(t).size == 1:
                t.CopyFrom(onnx.numpy_helper.from_array(np.array([3], np.int64), t.name))  # K = 3: wrong
        return frozen, gone

    monkeypatch.setattr(fix_shapes, "freeze", wrong)
    result = graphfix.fix(str(TOPK), "all", fix_shapes={"scores": (1, 50)})
    assert result.report.passes[0].verdict == "rolled-back"
    assert _dims(result.model) == _dims(onnx.load(str(TOPK)))


@pytest.mark.parametrize("shape,expect", [("nope:1x50", "unknown input 'nope'"), ("scores:2x50", "does not fit")])
def test_bad_fix_shapes_are_one_line(tmp_path, capsys, shape, expect):
    assert main([str(TOPK), str(tmp_path / "o.onnx"), "--fix-shapes", shape]) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.onnx").exists()


def test_an_output_the_fixed_shapes_make_constant_is_written_by_a_node(tmp_path):
    """``Shape(x)`` as a graph output folds to a constant under --fix-shapes: exported as is it was
    dropped ("Graph output 's' is not an output of any node") and the step rolled back."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", 3])],
                          [helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", 3])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(src))
    result = graphfix.fix(str(src), fix_shapes={"x": (2, 3)})
    record = next(p for p in result.report.passes if p.name == "fix-shapes")
    assert record.verdict == "kept", record.reason
    onnx.checker.check_model(result.model, full_check=True)
    assert [o.name for o in result.model.graph.output] == ["s", "y"]
