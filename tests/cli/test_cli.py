"""The command line: the main job, listings, reports, and every kind of bad input."""

from __future__ import annotations

import gc
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from fixtures.recipes import fold_clip
from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from graphfix.cli import fix as fix_cli
from graphfix.cli.main import main

ROOT = Path(__file__).resolve().parents[2]

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "fold_clip" / "superpoint_descriptor_norm.onnx"


@pytest.fixture
def src(tmp_path: Path) -> Path:
    p = tmp_path / "in.onnx"
    shutil.copy(FIXTURE, p)
    return p


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_main_job_writes_model_table_and_reports(src, tmp_path, capsys):
    dst = tmp_path / "out.onnx"
    rc = main([str(src), str(dst), "--passes", "all", "--input-shapes", "feat:1x4x6x5",
               "--report", str(tmp_path / "r.json"), "--report", str(tmp_path / "r.md")])
    assert rc == 0
    table = capsys.readouterr().out
    assert "fold-clip" in table and "kept" in table and "onnxruntime session" in table
    assert not any(n.op_type == "Cast" for n in onnx.load(str(dst)).graph.node)
    data = json.loads((tmp_path / "r.json").read_text())
    clip = next(p for p in data["passes"] if p["name"] == "fold-clip")
    assert clip["verdict"] == "kept" and clip["rewritten"] == 1 and max(o["max_abs"] for o in clip["outputs"].values()) <= 1e-6
    assert data["final"]["descriptors"]["max_abs"] <= 1e-6 and data["schema"] == 3
    assert data["sessions"] >= 2 and data["status"] == "ok"
    assert "| fold-clip |" in (tmp_path / "r.md").read_text()
    # polygraphy can read what we wrote
    from polygraphy.comparator import RunResults
    from polygraphy.json import load_json

    results = RunResults.load(data["files"]["polygraphy_outputs"])
    assert [name for name, _ in results] == ["graphfix-original", "graphfix-fixed"]
    assert list(load_json(data["files"]["polygraphy_inputs"])[0]) == ["feat"]


def test_load_inputs_round_trip(src, tmp_path):
    assert main([str(src), str(tmp_path / "a.onnx"), "--input-shapes", "feat:1x4x3x3", "--report", str(tmp_path / "r.json"), "--quiet"]) == 0
    assert main([str(src), str(tmp_path / "b.onnx"), "--load-inputs", str(tmp_path / "r.inputs.json"), "--quiet"]) == 0


def test_passes_listing(capsys):
    assert main(["passes"]) == 0
    assert "fold-clip" in capsys.readouterr().out
    assert main(["passes", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert any(p["name"] == "fold-clip" and "clip-bound-not-initializer" in p["fixes"] for p in listing)


def _bad_models(tmp: Path) -> dict[str, Path]:
    text = tmp / "notes.onnx"
    text.write_text("this is not a model\n" * 20)
    truncated = tmp / "truncated.onnx"
    truncated.write_bytes(FIXTURE.read_bytes()[: FIXTURE.stat().st_size // 2])
    cyc = model([node("Relu", ["x"], ["b"])], [inp("x", FLOAT, [2])], [out("b", FLOAT, [2])], name="cyc")
    del cyc.graph.node[:]
    cyc.graph.node.extend([node("Add", ["x", "b"], ["a"], name="A"), node("Relu", ["a"], ["b"], name="B")])
    cycle = tmp / "cycle.onnx"
    cycle.write_bytes(cyc.SerializeToString())
    dang = fold_clip.clip_int()
    dang.graph.node[0].input[1] = "nowhere"
    dangling = tmp / "dangling.onnx"
    dangling.write_bytes(dang.SerializeToString())
    old = fold_clip.clip_int()
    old.opset_import[0].version = 3
    opset = tmp / "opset3.onnx"
    opset.write_bytes(old.SerializeToString())
    return {"not-onnx": text, "truncated": truncated, "cycle": cycle, "dangling": dangling, "opset": opset}


@pytest.mark.parametrize(
    "kind,expect",
    [
        ("missing", "no such file"),
        ("not-onnx", "not a readable ONNX model"),
        ("truncated", "not a readable ONNX model"),
        ("cycle", "cycle"),
        ("dangling", "reads 'nowhere'"),
        ("opset", "unsupported opset 3"),
    ],
)
def test_bad_input_files(kind, expect, tmp_path, capsys):
    bad = _bad_models(tmp_path)
    path = tmp_path / "missing.onnx" if kind == "missing" else bad[kind]
    before = path.read_bytes() if path.exists() else None
    dst = tmp_path / "out.onnx"
    rc = main([str(path), str(dst)])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and expect in lines[0], err
    assert "Traceback" not in err
    assert not dst.exists() and not list(tmp_path.glob(".out.onnx*"))
    if before is not None:
        assert path.read_bytes() == before


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--passes", "fold-clip,nope"], "unknown pass 'nope'"),
        (["--skip", "nope"], "unknown pass 'nope'"),
        (["--input-shapes", "feat:1by4"], "bad --input-shapes"),
        (["--input-shapes", "nothere:1x2"], "unknown inputs: nothere"),
        (["--val-range", "feat:[1]"], "bad --val-range"),
        (["--trt", "eight"], "not a TensorRT version"),
    ],
)
def test_bad_options(args, expect, src, tmp_path, capsys):
    digest = _digest(src)
    dst = tmp_path / "out.onnx"
    assert main([str(src), str(dst), *args]) == 2
    err = capsys.readouterr().err
    assert expect in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not dst.exists() and _digest(src) == digest


def test_output_directory_missing(src, tmp_path, capsys):
    dst = tmp_path / "no" / "such" / "dir" / "out.onnx"
    assert main([str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and str(dst) in err


def test_output_equal_to_input(src, capsys):
    digest = _digest(src)
    assert main([str(src), str(src)]) == 2
    assert "never overwrites its input" in capsys.readouterr().err
    assert _digest(src) == digest


def test_verbose_shows_traceback(tmp_path):
    with pytest.raises(Exception, match="no such file"):
        main([str(tmp_path / "missing.onnx"), str(tmp_path / "o.onnx"), "--verbose"])


def test_strict_exit_code(src, tmp_path, monkeypatch, capsys):
    """--strict turns a rollback into exit 1 with nothing written."""
    from graphfix.passes.base import Pass

    def failing(self, graph, trt=None, force=False, log=None):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(Pass, "run_on_graph", failing)
    dst = tmp_path / "out.onnx"
    assert main([str(src), str(dst), "--strict", "--input-shapes", "feat:1x4x2x2"]) == 1
    assert "simulated failure" in capsys.readouterr().err and not dst.exists()


def test_python_dash_m_is_the_command(tmp_path):
    out = tmp_path / "fixed.onnx"
    proc = subprocess.run([sys.executable, "-m", "graphfix", str(ROOT / "fixtures" / "demo" / "superglue_matcher.onnx"), str(out),
                           "--no-verify", "--quiet"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and proc.stderr == ""
    bad = subprocess.run([sys.executable, "-m", "graphfix", str(tmp_path / "missing.onnx"), str(out)], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("graphfix: error:") and "Traceback" not in bad.stderr


SHARED_DIMS = ROOT / "fixtures" / "dynamic_shapes" / "shared_dims.onnx"


@pytest.mark.parametrize("shape_args,expect", [
    (["--input-shapes", "a:[5,3]", "b:[5,3]"], [{"a": [5, 3], "b": [5, 3]}]),  # polygraphy
    (["--input-shapes", "a:5x3,b:5x3"], [{"a": [5, 3], "b": [5, 3]}]),  # trtexec
    (["--input-shapes", "a:[5,3]", "b:[5,3]", "--input-shapes", "a:[2,3]", "b:[2,3]"],
     [{"a": [5, 3], "b": [5, 3]}, {"a": [2, 3], "b": [2, 3]}]),  # two sets
])
def test_input_shapes_in_trtexec_and_polygraphy_syntax(shape_args, expect, tmp_path):
    assert main([str(SHARED_DIMS), str(tmp_path / "o.onnx"), *shape_args, "--report", str(tmp_path / "r.json"), "--quiet"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["shapes"]["shapes"] == expect


def test_profile_shapes_in_polygraphy_syntax(tmp_path, capsys):
    assert main([str(SHARED_DIMS), str(tmp_path / "o.onnx"), "--trt", "8.6", "--trt-min-shapes", "a:[1,3]", "b:[1,3]",
                 "--trt-opt-shapes", "a:[4,3]", "b:[4,3]", "--trt-max-shapes", "a:[8,3]", "b:[8,3]"]) == 0
    assert "--minShapes=a:1x3,b:1x3 --optShapes=a:4x3,b:4x3 --maxShapes=a:8x3,b:8x3" in capsys.readouterr().out


def test_paths_after_multi_value_shapes_are_pointed_out(tmp_path, capsys):
    assert main(["fix", "--input-shapes", "a:[5,3]", str(SHARED_DIMS), str(tmp_path / "o.onnx")]) == 2
    err = capsys.readouterr().err
    assert "bad --input-shapes entry" in err and "give IN and OUT before the shape options" in err


def test_exit_4_when_the_target_still_rejects_the_written_model(tmp_path, capsys):
    """NonZero has no importer before 8.5 and no rewrite: the model is written, the exit code and
    the summary say TensorRT 8.0 will still reject it, and no trtexec line is offered."""
    out = tmp_path / "out.onnx"
    code = main([str(ROOT / "fixtures" / "gathernd_decompose" / "masked_select_dynamo.onnx"), str(out), "--passes", "auto", "--trt", "8.0"])
    printed = capsys.readouterr()
    assert code == 4
    assert out.exists()
    assert "will still reject" in printed.err and "1 blocking finding(s) left" in printed.err
    assert "NonZero" in printed.out and "trtexec" not in printed.out
    assert "status: blocked" in printed.out
    assert main([str(ROOT / "fixtures" / "gathernd_decompose" / "masked_select_dynamo.onnx"), str(out), "--passes", "auto", "--trt", "8.6"]) == 0


def test_several_models_into_an_out_dir(tmp_path, capsys):
    """A folder of exports in CI: each model fixed on its own into --out-dir, reports named after
    it, a refused model said in one line while the others go on, the worst outcome as exit code."""
    out = tmp_path / "fixed"
    out.mkdir()
    good = ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx"
    blocked = ROOT / "fixtures" / "gathernd_decompose" / "masked_select_dynamo.onnx"
    code = main([str(good), str(blocked), "--out-dir", str(out), "--passes", "auto", "--trt", "8.0", "--report", "r.json", "--quiet"])
    assert code == 4  # the NonZero export stays rejected by 8.0
    assert (out / "clip_cast_bounds.onnx").exists() and (out / "masked_select_dynamo.onnx").exists()
    assert (out / "clip_cast_bounds.r.json").exists() and (out / "masked_select_dynamo.r.json").exists()
    assert "2 of 2 model(s) written" in capsys.readouterr().err
    code = main([str(good), str(tmp_path / "missing.onnx"), "--out-dir", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "missing.onnx: no such file" in err and "1 of 2 model(s) written" in err
    assert main([str(good), str(good), "--out-dir", str(out)]) == 2
    assert "would collide" in capsys.readouterr().err
    assert main([str(good), "--out-dir", str(tmp_path / "nope")]) == 2
    assert main([str(good)]) == 2 and "expected IN OUT" in capsys.readouterr().err


@pytest.mark.parametrize("batch", [False, True])
def test_collector_is_off_while_the_files_are_written_and_on_after(batch, tmp_path, monkeypatch):
    """The CLI writes its files with the collector off (a collection would scan the whole graph
    only to free what the exit frees), and an in-process caller gets it back on."""
    seen = []
    real = fix_cli.save_model
    monkeypatch.setattr(fix_cli, "save_model", lambda *a, **k: (seen.append(gc.isenabled()), real(*a, **k))[1])
    src = ROOT / "fixtures" / "fold_clip" / "superpoint_descriptor_norm.onnx"
    args = [src, "--out-dir", tmp_path] if batch else [src, tmp_path / "out.onnx"]
    assert main([str(a) for a in [*args, "--no-verify", "--quiet"]]) == 0
    assert seen == [False] and gc.isenabled()
