"""``graphfix check`` over many models and releases: the readiness matrix, its formats, --jobs,
and the exit code CI reads."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from graphfix.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
TRT_CHECK = ROOT / "fixtures" / "trt_check"
DEMO = ROOT / "fixtures" / "demo" / "superglue_matcher.onnx"
RELEASES = "8.2,8.6,10.1"


def _csv(capsys) -> dict[str, dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    return {Path(r.pop("model")).name: r for r in rows}


def test_matrix_as_csv_over_a_directory_and_a_file(capsys):
    assert main(["check", str(TRT_CHECK), str(DEMO), "--trt", RELEASES, "--csv"]) == 1  # NonZero stays blocked before 8.5
    rows = _csv(capsys)
    assert list(rows) == ["grid_sample_opset16.onnx", "layer_norm_opset17.onnx", "nonzero_mask.onnx", "superglue_matcher.onnx"]
    assert rows["grid_sample_opset16.onnx"] == {"8.2": "fixable: gridsample-decompose", "8.6": "clean", "10.1": "clean"}
    assert rows["nonzero_mask.onnx"]["8.2"].startswith("blocked: NonZero /NonZero: no NonZero before TensorRT 8.5")
    assert rows["nonzero_mask.onnx"]["8.6"] == "clean"
    assert rows["superglue_matcher.onnx"]["10.1"] == "fixable: cumsum-decompose"


def test_json_is_the_same_with_parallel_jobs(capsys):
    assert main(["check", str(TRT_CHECK), "--trt", RELEASES, "--json"]) == 1
    serial = json.loads(capsys.readouterr().out)
    assert main(["check", str(TRT_CHECK), "--trt", RELEASES, "--json", "--jobs", "2"]) == 1
    assert json.loads(capsys.readouterr().out) == serial
    nonzero = next(r for r in serial["models"] if r["model"].endswith("nonzero_mask.onnx"))
    assert serial["releases"] == ["8.2", "8.6", "10.1"]
    assert nonzero["releases"]["8.2"]["status"] == "blocked" and nonzero["releases"]["10.1"] == {"status": "clean", "passes": [], "blocked": []}


def test_terminal_and_markdown_tables(capsys):
    assert main(["check", str(DEMO), str(TRT_CHECK / "nonzero_mask.onnx"), "--trt", "8.0,8.6"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["model", "8.0", "8.6"] and set(out[1]) <= {"-", " "}
    assert "fixable: fold-clip, scatternd-decompose, +5" in out[2] and "BLOCKED: NonZero" in out[3]
    assert out[-1] == "2 model(s) x 2 release(s): 1 blocked after fixing"
    assert main(["check", str(TRT_CHECK / "grid_sample_opset16.onnx"), "--trt", "8.2,8.6", "--md"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| model | 8.2 | 8.6 |", "|---|---|---|",
        f"| `{TRT_CHECK / 'grid_sample_opset16.onnx'}` | fixable: gridsample-decompose | clean |"]


def test_nothing_blocked_after_fixing_exits_0(capsys):
    assert main(["check", str(DEMO), str(TRT_CHECK / "layer_norm_opset17.onnx"), "--trt", "8.0,10.1", "--csv"]) == 0


def test_unreadable_model_is_a_row_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["check", str(bad), str(TRT_CHECK / "layer_norm_opset17.onnx"), "--trt", "8.6", "--csv"]) == 2
    rows = _csv(capsys)
    assert rows["bad.onnx"]["8.6"].startswith("error: ") and rows["layer_norm_opset17.onnx"]["8.6"] == "clean"


@pytest.mark.parametrize("args,expect", [
    (["--trt", "8.2,banana"], "not a TensorRT version"),
    (["--trt", ","], "names no release"),
    (["--trt", "8.6", "--jobs", "0"], "--jobs 0"),
])
def test_bad_options(args, expect, capsys):
    assert main(["check", str(TRT_CHECK), *args]) == 2
    assert expect in capsys.readouterr().err
