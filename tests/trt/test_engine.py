"""The engine step: clear failure without TensorRT, command lines, profiles, and the build wiring
(exercised with polygraphy's TensorRT loaders replaced by onnxruntime, since CI has no GPU)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

import graphfix
from graphfix import engine
from graphfix.cli.main import main
from graphfix.errors import GraphfixError

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = "fixtures/einsum_to_matmul/lightglue_ellipsis.onnx"
SHAPES = ["--trt-min-shapes", "sim:1x4x1x1,v:1x4x1x16", "--trt-opt-shapes", "sim:2x4x8x8,v:1x4x8x16",
          "--trt-max-shapes", "sim:4x4x64x64,v:1x4x64x16"]


def test_missing_tensorrt_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(engine, "tensorrt_available", lambda: False)
    with pytest.raises(GraphfixError, match=r"TensorRT is not installed; install graphfix\[trt\]"):
        engine.build_and_compare("m.onnx", "m.engine", [], None)


def test_cli_build_without_tensorrt_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """An exit != 0 leaves no file behind (issue 9), so --build without TensorRT is refused up front."""
    monkeypatch.setattr(engine, "tensorrt_available", lambda: False)
    out = tmp_path / "fixed.onnx"
    rc = main([FIXTURE, str(out), "--passes", "auto", "--trt", "8.6", "--input-shapes", "sim:2x4x5x6,v:1x4x6x16",
               "--build", str(tmp_path / "fixed.engine"), *SHAPES])
    captured = capsys.readouterr()
    assert rc == 2 and not out.exists() and list(tmp_path.iterdir()) == []
    assert captured.err.strip().splitlines() == [captured.err.strip()]
    assert captured.err.startswith("graphfix: error: --build: TensorRT is not installed")


def test_cli_trt_prints_the_build_command_lines(tmp_path, capsys):
    out = tmp_path / "fixed.onnx"
    assert main([FIXTURE, str(out), "--passes", "auto", "--trt", "8.6", "--input-shapes", "sim:2x4x5x6,v:1x4x6x16", *SHAPES]) == 0
    captured = capsys.readouterr()
    assert out.exists() and "trtexec --onnx=" in captured.out and "--minShapes=sim:1x4x1x1,v:1x4x1x16" in captured.out


def test_command_lines():
    shapes = engine.parse_profile_shapes(["x:1x3x32x32"], ["x:4x3x64x64"], ["x:8x3x128x128"])
    lines = engine.command_lines("m.onnx", "m.engine", shapes, fp16=True)
    assert shlex.split(lines["trtexec"]) == ["trtexec", "--onnx=m.onnx", "--saveEngine=m.engine", "--minShapes=x:1x3x32x32",
                                             "--optShapes=x:4x3x64x64", "--maxShapes=x:8x3x128x128", "--fp16"]
    assert shlex.split(lines["polygraphy"]) == ["polygraphy", "run", "m.onnx", "--trt", "--onnxrt", "--save-engine", "m.engine",
                                                "--trt-min-shapes", "x:[1,3,32,32]", "--trt-opt-shapes", "x:[4,3,64,64]",
                                                "--trt-max-shapes", "x:[8,3,128,128]", "--input-shapes", "x:[4,3,64,64]", "--fp16"]
    assert "Shapes" not in engine.command_lines("m.onnx", "m.engine")["trtexec"]
    compared = engine.command_lines("m.onnx", "m.engine", shapes, reference=("r.inputs.json", "r.outputs.json"))
    assert shlex.split(compared["polygraphy"])[3:5] == ["--trt", "--save-engine"]
    assert compared["polygraphy"].endswith("--load-inputs r.inputs.json --load-outputs r.outputs.json --atol 0.001 --rtol 0.001")


def _printed(capsys) -> dict[str, list[str]]:
    return {tool: shlex.split(line) for tool, line in (ln.split(": ", 1) for ln in capsys.readouterr().out.splitlines()
                                                       if ln.startswith(("trtexec: ", "polygraphy: ")))}


@pytest.mark.parametrize("fixture,report,trt", [
    ("shared_dims.onnx", True, "8.0"), ("superpoint_cells.onnx", True, "8.0"), ("superpoint_cells.onnx", False, "8.0"),
    ("superpoint_cells.onnx", True, "8.6")])
def test_printed_polygraphy_line_runs_as_printed(fixture, report, trt, tmp_path, monkeypatch, capsys):
    """Dynamic model: the printed lines carry a profile holding the verified shapes, and with a
    JSON report the graphfix side files; the polygraphy line runs as printed, onnxruntime standing
    in for TensorRT (CI has no GPU). At 8.6 nothing is rewritten: no session, so no side files,
    and the profile holds the shape search's first candidates (not run)."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "fixtures" / "dynamic_shapes" / fixture, "in.onnx")
    assert main(["in.onnx", "fixed.onnx", "--trt", trt, *(["--report", "r.json"] if report else [])]) == 0
    printed = _printed(capsys)
    assert {"--minShapes", "--optShapes", "--maxShapes"} <= {a.split("=")[0] for a in printed["trtexec"]}
    poly = printed["polygraphy"]
    assert {"--trt-min-shapes", "--trt-opt-shapes", "--trt-max-shapes"} <= set(poly)
    rewritten = trt == "8.0"
    if not rewritten:
        assert json.loads(Path("r.json").read_text())["sessions"] == 0 and not Path("r.inputs.json").exists()
    report = report and rewritten
    assert (poly[poly.index("--load-inputs") + 1] == "r.inputs.json") if report else "--input-shapes" in poly
    proc = subprocess.run(["--onnxrt" if a == "--trt" else a for a in poly], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "PASSED" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    if report:  # it compared with graphfix's results, on each verified shape set
        assert "vs. graphfix-original" in proc.stdout
        assert f"Passed: {len(json.loads(Path('r.json').read_text())['shapes']['shapes'])}/" in proc.stdout


@pytest.mark.parametrize("lo,opt,hi,msg", [
    (["x:1x3"], ["y:1x3"], ["x:1x3"], "same inputs"),
    (["x:1x3"], ["x:1x3x1"], ["x:1x3"], "different ranks"),
    (["x:2x3"], ["x:1x3"], ["x:4x3"], "min <= opt <= max"),
])
def test_profile_validation(lo, opt, hi, msg):
    with pytest.raises(GraphfixError, match=msg):
        engine.parse_profile_shapes(lo, opt, hi)


def test_build_wiring_with_onnxruntime_standing_in_for_tensorrt(tmp_path, monkeypatch):
    """Everything but TensorRT itself: profile, config, save, run on the same feeds, comparison."""
    import polygraphy.backend.trt as ptrt
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

    seen: dict = {}
    monkeypatch.setattr(engine, "tensorrt_available", lambda: True)
    monkeypatch.setattr(ptrt, "NetworkFromOnnxPath", lambda path: seen.setdefault("onnx", path))
    monkeypatch.setattr(ptrt, "CreateConfig", lambda fp16, profiles: seen.update(fp16=fp16, profiles=profiles) or "config")
    monkeypatch.setattr(ptrt, "EngineFromNetwork", lambda network, config: ("engine", network, config))
    monkeypatch.setattr(ptrt, "SaveEngine", lambda eng, path: seen.setdefault("saved", path) and eng)
    monkeypatch.setattr(ptrt, "TrtRunner", lambda build, name: OnnxrtRunner(SessionFromOnnx(Path(seen["onnx"]).read_bytes()), name=name))
    out = tmp_path / "fixed.onnx"
    result = graphfix.fix(FIXTURE, "all", input_shapes={"sim": (2, 4, 5, 6), "v": (1, 4, 6, 16)}, output=out)
    shapes = engine.parse_profile_shapes(SHAPES[1:2], SHAPES[3:4], SHAPES[5:6])
    report = engine.build_and_compare(str(out), str(tmp_path / "e.engine"), result.outcome.feeds, result.outcome.final, shapes)
    assert report["passed"] and report["max_abs"] == 0 and set(report["outputs"]) == {"y"}
    assert seen["saved"] == str(tmp_path / "e.engine") and seen["fp16"] is False and len(seen["profiles"]) == 1
