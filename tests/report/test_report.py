"""The reports people read: the Markdown stays bounded however many regions a run rewrote (the
JSON keeps every record), TensorRT findings are tables, and the JSON says what was fed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest

from bench.scale import chain
from graphfix.cli.main import main
from graphfix.report import markdown as markdown_mod
from graphfix.report import summary, text
from graphfix.report.model import KEPT, ROLLED_BACK, Report
from graphfix.report.text import DIAGRAMS_PER_KIND, MAX_DIAGRAMS, MAX_ROWS

ROOT = Path(__file__).resolve().parents[2]


def _diagrams(markdown: str) -> list[str]:
    return re.findall(r"^```mermaid$", markdown, re.M)


def _run(model: Path, tmp: Path, *extra: str) -> tuple[str, dict]:
    md, js = tmp / f"{model.stem}.md", tmp / f"{model.stem}.json"
    assert main([str(model), str(tmp / f"{model.stem}.fixed.onnx"), "--report", str(md), "--report", str(js), "--quiet", *extra]) == 0
    return md.read_text(), json.loads(js.read_text())


def test_markdown_does_not_grow_with_the_model(tmp_path):
    """A chain of fold-clip blocks (bench/scale.py's model): 5x the nodes, the same Markdown;
    every region stays in the JSON. (Before grouping, 5000 nodes wrote 765 KB of Markdown.)"""
    sizes = {}
    for blocks in (250, 1250):  # 1000 and 5000 nodes
        path = tmp_path / f"chain{blocks}.onnx"
        onnx.save(chain(blocks, 8), path)
        md, data = _run(path, tmp_path)
        assert len(data["nodes"]) == blocks and all(r["diagram"] for r in data["nodes"])
        assert len(_diagrams(md)) == DIAGRAMS_PER_KIND
        assert f"| fold-clip | Clip | {blocks} | **kept** | 0 (`y0`) |" in md
        # per-pass cost: each Clip reads [1, 8] and a float32 bound, writes [1, 8]: 8 FLOPs, 68 bytes, as before
        assert f"| fold-clip | {blocks} | {blocks * 8 / 1000:.3g}k → {blocks * 8 / 1000:.3g}k (1x) | {blocks * 68 / 1000:.3g}k" in md
        assert sum(line.startswith("|") for line in md.splitlines()) <= len(data["passes"]) + 13  # + the cost table
        sizes[blocks] = len(md.encode())
    assert sizes[1250] < 20_000 and sizes[1250] <= sizes[250] * 1.05, sizes


def _record(passes: str, op: str, k: int, verdict: str = KEPT) -> dict:
    return {"passes": [passes], "nodes": [f"{op} '/{op}{k}'"], "verdict": verdict, "checked": "on its own",
            "outputs": {f"t{k}": {"max_abs": float(k), "max_rel": 0.0, "passed": verdict == KEPT}},
            "diagram": f"flowchart LR\n  n{k}[\"{op}{k}\"]"}


def test_rewrites_grouped_rolled_back_first_and_diagrams_bounded():
    """70 kinds of rewrite x 4 regions: one row per kind up to MAX_ROWS, the rolled-back kind
    first and drawn, at most MAX_DIAGRAMS diagrams."""
    records = [_record(f"pass{p}", "Op", 4 * p + k) for p in range(70) for k in range(4)]
    records[-1] = _record("pass69", "Op", 279, ROLLED_BACK)
    md = markdown_mod.markdown(Report("in.onnx", "out.onnx", {}, nodes=records))
    groups = summary.rewrite_groups(records)
    assert len(groups) == 71 and groups[0][0]["verdict"] == ROLLED_BACK
    rows = [line for line in md.split("## Rewrites")[1].split("## Rewritten regions")[0].splitlines() if re.match(r"\| pass\d", line)]
    assert len(rows) == MAX_ROWS and rows[0].startswith("| pass69 | Op | 1 | **rolled-back** | 2.79e+02")
    assert f"… {71 - MAX_ROWS} more kinds of rewrite" in md
    assert len(_diagrams(md)) == MAX_DIAGRAMS and "n279[" in md
    assert "| pass0 | Op | 4 | **kept** | 3.00e+00 (`t3`) | Op `/Op0`, Op `/Op1`, Op `/Op2`, Op `/Op3` |" in md


def test_small_run_draws_every_region_and_trt_findings_are_tables(tmp_path):
    md, data = _run(ROOT / "fixtures" / "demo" / "superglue_matcher.onnx", tmp_path, "--passes", "auto", "--trt", "8.0")
    assert len(_diagrams(md)) == len(data["nodes"]) == 8
    assert "```json" not in md
    assert "### before: 8 blocking finding(s)" in md and "### after: 0 blocking finding(s)" in md
    assert "| blocking | Clip | 2 | `/normalize0/Clip` (and 1 more like it: `/normalize1/Clip`) |" in md


def test_table_cells_hold_any_text():
    assert text.md_cell("a | b\nc") == "a \\| b c"


@pytest.mark.parametrize("extra", [[], ["--input-shapes", "image:1x1x16x24"]])
def test_json_inputs_and_loaded_shapes(extra, tmp_path):
    """``inputs`` names dtype and shape as fed; ``shapes`` after --load-inputs lists the loaded ones."""
    model = ROOT / "fixtures" / "dynamic_shapes" / "superpoint_cells.onnx"
    _, data = _run(model, tmp_path, *extra)
    fed = data["shapes"]["shapes"][0]["image"]
    assert data["inputs"] == {"image": {"dtype": "float32", "shape": fed}} and all(isinstance(d, int) for d in fed)
    loaded = tmp_path / "loaded"
    loaded.mkdir()
    _, again = _run(model, loaded, "--load-inputs", data["files"]["polygraphy_inputs"])
    assert again["shapes"]["shapes"] == data["shapes"]["shapes"] and again["inputs"] == data["inputs"]


def test_json_inputs_without_verification_are_declared(tmp_path):
    _, data = _run(ROOT / "fixtures" / "dynamic_shapes" / "superpoint_cells.onnx", tmp_path, "--no-verify")
    assert data["inputs"] == {"image": {"dtype": "float32", "shape": [1, 1, "8*hc", "8*wc"]}}


def test_a_dim_name_that_is_not_utf8_is_written_escaped(tmp_path):
    """protobuf gives such a dim name as bytes (onnxruntime runs the model): the JSON report failed
    ("Object of type bytes is not JSON serializable", exit 3; the fuzz's seed 17 case 3127)."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "QZQZ"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "QZQZ"])])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    assert data.count(b"\x12\x04QZQZ") == 2
    src = tmp_path / "m.onnx"
    src.write_bytes(data.replace(b"\x12\x04QZQZ", b"\x12\x04\xce\xce\xce\xce"))
    _, report = _run(src, tmp_path, "--no-verify")
    assert report["inputs"]["x"]["shape"] == [2, "\\xce\\xce\\xce\\xce"]
