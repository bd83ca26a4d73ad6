"""Verification on exports of real model code (fixtures/real, made by fixtures/real/export_real.py):
shapes that mean something, the same verdict every run, exact rewrites kept at the Jetson releases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import graphfix
from graphfix.cli.main import main
from graphfix.verify.shapes import Choice, choose

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"


def _cli(tmp_path: Path, name: str, trt: str, k: int = 0) -> tuple[int, dict]:
    report = tmp_path / f"r{k}.json"
    code = main([str(REAL / f"{name}.onnx"), str(tmp_path / "out.onnx"), "--passes", "auto", "--trt", trt, "--quiet",
                 "--report", str(report)])
    return code, json.loads(report.read_text())


def test_swin_verified_at_image_sizes_layernorm_kept_same_numbers_every_run(tmp_path):
    runs = [_cli(tmp_path, "swin_dynamic_hw", "8.5", k) for k in range(3)]
    for code, rep in runs:
        assert code == 0
        assert rep["shapes"]["shapes"] == [{"pixel_values": [1, 3, 224, 224]}, {"pixel_values": [2, 3, 256, 256]}]
        ln = next(p for p in rep["passes"] if p["name"] == "layernorm-decompose")
        assert ln["verdict"] == "kept" and ln["rewritten"] == 11
        assert not [f for f in rep["trt"]["after"]["findings"] if f["severity"] == "blocking"]
    numbers = [[(p["name"], p["outputs"]) for p in rep["passes"]] for _, rep in runs]
    assert numbers[0] == numbers[1] == numbers[2]


@pytest.mark.parametrize("trt", ["8.2", "8.5"])
@pytest.mark.parametrize("name", ["raft_small_like", "deformable_detr_like"])
def test_chained_gridsample_decomposed_and_kept(name, trt):
    result = graphfix.fix(str(REAL / f"{name}.onnx"), "auto", trt=trt)
    grid = next((p for p in result.report.passes if p.name == "gridsample-decompose"), None)
    if name == "deformable_detr_like" and trt == "8.5":
        assert grid is None  # bilinear 4-D GridSample: 8.5 imports it
    else:
        assert grid is not None and grid.verdict == "kept" and grid.rolled_back_nodes == 0, grid
        assert not any(n.op_type == "GridSample" for n in result.model.graph.node)
    assert result.report.status == "ok", [p.reason for p in result.report.passes]


def test_candidates_where_the_original_is_unusable_are_skipped():
    """A shape whose original outputs are nondeterministic or degenerate cannot judge a rewrite."""
    import onnx

    model = onnx.load(str(REAL / "swin_dynamic_hw.onnx"))
    seen = []

    def runs(shapes):
        seen.append(shapes["pixel_values"])
        return "onnxruntime's outputs for the original model differ between two identical runs" if shapes["pixel_values"][2] < 300 else None

    choice: Choice = choose(model, [], runs)
    assert [s["pixel_values"][2] for s in choice.shapes] == [320, 384]
    assert seen[:2] == [(1, 3, 224, 224), (2, 3, 256, 256)]


def test_a_dim_named_alike_takes_the_given_value_everywhere():
    """--input-shapes input_ids:2x16 sets attention_mask's batch/sequence too (polygraphy users
    give one input; the other shares its dim names)."""
    result = graphfix.fix(str(REAL / "gpt_cumsum_positions.onnx"), "all", input_shapes={"input_ids": (2, 16)},
                          val_range={"attention_mask": (0, 1)})
    assert result.report.shapes["shapes"] == [{"input_ids": [2, 16], "attention_mask": [2, 16]}]
    assert result.report.status == "ok"


def test_expressions_over_given_names_are_evaluated():
    from fixtures.recipes._onnx import FLOAT, inp, model, node, out
    from graphfix.verify.shapes import complete, dynamic_dims

    m = model([node("Identity", ["a"], ["y"]), node("Identity", ["b"], ["z"]), node("Identity", ["c"], ["w"])],
              [inp("a", FLOAT, ["batch", "seq"]), inp("b", FLOAT, ["batch", "2*seq"]), inp("c", FLOAT, ["batch", "other"])],
              [out("y", FLOAT, ["batch", "seq"]), out("z", FLOAT, ["batch", "2*seq"]), out("w", FLOAT, ["batch", "other"])])
    assert complete(m, {"a": (3, 5)}) == {"a": (3, 5), "b": (3, 10)}
    rows = dynamic_dims(m, {"a": (3, 5)})
    assert list(rows) == ["c"] and rows["c"][0] == 3  # batch bound, 'other' still free
