"""A shape tensor computed from data has no exact rewrite: a torchvision Mask R-CNN pastes each
detected mask with a Resize and a Pad sized from the box coordinates, 60 nodes from the NonZero
that picks the RoIs. What TensorRT 8.5-10.1 will reject is said in a few lines a person reads: the
path's ends and length (every node in --json), one group per data source, and what to change
upstream. fixtures/real/maskrcnn_paste_masks.onnx (export_real_rcnn.py) is the export."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from graphfix.check.findings import DETECTOR_ADVICE, check_model
from graphfix.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
MASKRCNN = ROOT / "fixtures" / "real" / "maskrcnn_paste_masks.onnx"


def _data_findings(model: onnx.ModelProto, trt: str) -> list:
    return [f for f in check_model(model, trt).findings if f.error_id == "layer-cannot-compute-shape-tensor"]


@pytest.mark.parametrize("trt", ["8.5", "10.1"])
def test_finding_names_the_ends_and_length_and_keeps_the_whole_path(trt):
    found = _data_findings(onnx.load(str(MASKRCNN)), trt)
    assert len(found) >= 5
    for f in found:
        assert len(f.path) > 40  # NonZero ... box head ... box coordinates ... the reader
        assert f.message.count(" -> ") == 2 and f"({len(f.path) - 1} nodes)" in f.message, f.message
        assert f.path[0] in f.message and len(f.message) < 300
        assert f.upstream == DETECTOR_ADVICE and f.fix_pass is None
        assert f.as_dict()["path"] == f.path  # --json: every node
    assert {f.op for f in found} >= {"Resize", "ConstantOfShape"}


def test_check_prints_one_short_group_per_data_source(capsys):
    assert main(["check", str(MASKRCNN), "--trt", "8.5"]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    group = [k for k, line in enumerate(lines) if "shape tensor(s) computed from data" in line]
    assert len(group) == 1, out  # every Resize/Slice/ConstantOfShape input from that NonZero, once
    block = lines[group[0]:]
    block = block[: next((k for k, line in enumerate(block[1:], 1) if not line.startswith(" ")), len(block))]
    assert len(block) <= 5, block
    assert any(line.strip().startswith("upstream:") and "mask pasting" in line and "ROIAlign" in line
               and "fixed detection count" in line for line in block)
    assert any("nodes); --json lists every node" in line for line in block)
    assert max(len(line) for line in lines) < 400
    assert main(["check", str(MASKRCNN), "--trt", "8.5", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    paths = [f["path"] for f in data["findings"] if f["error_id"] == "layer-cannot-compute-shape-tensor"]
    assert paths and all(len(p) > 40 for p in paths)


def test_fix_summary_says_it_in_a_few_lines(tmp_path, capsys):
    assert main([str(MASKRCNN), str(tmp_path / "out.onnx"), "--passes", "auto", "--trt", "8.5", "--no-verify",
                 "--report", str(tmp_path / "r.md"), "--report", str(tmp_path / "r.html")]) == 4
    out = capsys.readouterr().out
    after = (tmp_path / "r.md").read_text().split("### after")[1]
    rows = [line for line in after.splitlines() if "shape tensor" in line]
    assert len(rows) == 1 and "mask pasting" in rows[0] and "nodes)" in rows[0], rows  # one row per data source
    assert (tmp_path / "r.html").read_text().count("shape tensor(s) computed from data") == 2  # before and after
    after = out.split("TensorRT 8.5:")[1].splitlines()[1:]
    assert 1 <= len([line for line in after if line.startswith("  ") and not line.startswith("    ")]) <= 2, after
    assert len(after) <= 8 and max(len(line) for line in after) < 400, after
    assert any("upstream:" in line for line in after)


def test_readiness_matrix_names_each_source_once(capsys):
    assert main(["check", str(MASKRCNN), str(MASKRCNN.parent / "fasterrcnn_transform_rpn.onnx"), "--trt", "8.5,10.1"]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith(f"{MASKRCNN} @ ")]
    notes = [line for line in lines if "computed from data" in line]
    assert len(notes) == 2 and all("upstream:" in n for n in notes), notes
    # the paste loop's growing result (graphfix.check.loops): its own note, once per release
    assert len([line for line in lines if "Loop Loop_2383" in line]) == 2, lines
