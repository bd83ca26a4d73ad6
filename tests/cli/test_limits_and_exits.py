"""Numbers a user types are bounded, a batch's file names cannot collide, and a run ends the way
a Unix tool does: ``check --jobs`` stopped by a signal to its process group exits 143 with one
line, and ``graphfix passes | head -1`` exits 141 every time (a reader that closed the pipe).
Every refusal is exit 2 with one line that names the limit (never exit 3)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import graphfix
from graphfix.cli.common import exit_code
from graphfix.cli.main import main
from graphfix.errors import GraphfixError

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """Relu over x[N, 4]: one dynamic dim to fix or set."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    path = tmp_path / "src" / "m.onnx"
    path.parent.mkdir()
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _one_line_refusal(args: list, capfd, *expect: str) -> str:
    assert main([str(a) for a in args]) == 2
    err = [line for line in capfd.readouterr().err.splitlines() if not line.endswith("s") or "error" in line]
    assert len(err) == 1 and err[0].startswith("graphfix: error: "), err
    for e in expect:
        assert e in err[0], err[0]
    return err[0]


# ------------------------------------------------------------------ numbers
@pytest.mark.parametrize("args,limit", [
    (["--fix-shapes", "x:99999999999x4"], "2147483647"),
    (["--fix-shapes", "x:" + "9" * 400 + "x4"], "2147483647"),
    (["--fix-shapes", "x:2000000000x4"], "2 GiB"),
    (["--input-shapes", "x:[1,99999999999]"], "2147483647"),
    (["--trt-max-shapes", "x:99999999999x4"], "2147483647"),
    (["--iterations", "5000"], "1..1000"),
    (["--iterations", "99999999999999999999"], "1..1000"),
    (["--trt", "8." + "9" * 5000], "9 digits"),
    (["--seed", "9" * 40], "0..4294967295"),
    (["--seed", "9" * 5000], "--seed"),
])
def test_fix_numbers_out_of_range_are_refused_with_the_limit(args, limit, src, tmp_path, capfd):
    line = _one_line_refusal([src, tmp_path / "out.onnx", *args], capfd, limit)
    assert len(line) < 400
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("args,says", [
    (["--fix-shapes", "x:1x4", "x:2x4"], ("--fix-shapes", "'x' twice", "1x4 and 2x4")),
    (["--fix-shapes", "x:1x4,x:1x4"], ("--fix-shapes", "'x' twice")),
    (["--trt-min-shapes", "x:1x4", "x:2x4", "--trt-opt-shapes", "x:2x4", "--trt-max-shapes", "x:4x4"],
     ("--trt-min-shapes", "'x' twice")),
    (["--val-range", "x:[0,1]", "--val-range", "x:[0,5]"], ("--val-range", "'x' twice")),
])
def test_one_input_given_two_values_is_refused_not_the_last_kept(args, says, src, tmp_path, capfd):
    _one_line_refusal([src, tmp_path / "out.onnx", *args], capfd, *says)
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("jobs", ["0", "257", "99999999999999999999"])
def test_check_jobs_out_of_range_is_refused_with_the_limit(jobs, src, capfd):
    _one_line_refusal(["check", src, src, "--trt", "8.6", "--jobs", jobs], capfd, "--jobs", "1..256")


@pytest.mark.parametrize("kw", [{"fix_shapes": {"x": (10**30, 4)}}, {"input_shapes": {"x": (-1, 4)}},
                                {"profile_shapes": [{"x": (1, 2**31)}]}, {"iterations": 10**6}])
def test_api_refuses_the_same_numbers(kw, src):
    with pytest.raises(GraphfixError):
        graphfix.fix(str(src), **kw)


# ------------------------------------------------------------------ batch names
@pytest.mark.parametrize("inputs,reports,says", [
    (["model.onnx", "model.ONNX"], [], "differ only in case"),
    (["m.onnx", "b/m"], ["r.json"], "m.r.json"),
    (["m.onnx", "b/m"], ["r.md"], "m.r.md"),
    (["x.onnx", "b/x.r.md"], ["r.md"], "x.r.md"),
    (["x.onnx", "b/x.r.inputs.json"], ["r.json"], "x.r.inputs.json"),
    (["a.onnx", "b/a.onnx"], [], "a.onnx"),
])
def test_batch_names_that_collide_are_refused_before_any_work(inputs, reports, says, src, tmp_path, capfd):
    (tmp_path / "b").mkdir()
    for name in inputs:
        shutil.copy(src, tmp_path / name)
    out = tmp_path / "out"
    out.mkdir()
    args = [*(tmp_path / n for n in inputs), "--out-dir", out, *(a for r in reports for a in ("--report", r)), "--quiet"]
    _one_line_refusal(args, capfd, "--out-dir", says)
    assert list(out.iterdir()) == []


def test_an_out_dir_that_is_a_file_is_said_to_be_no_directory(src, tmp_path, capfd):
    afile = tmp_path / "out.txt"
    afile.write_text("")
    line = _one_line_refusal([src, "--out-dir", afile], capfd, "--out-dir: not a directory")
    assert "no such" not in line


def test_batch_output_onto_another_input_is_refused(src, tmp_path, capfd):
    """``x.onnx``'s report would be written over the input ``out/x.r.md`` before it is read."""
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(src, out / "x.r.md")
    before = (out / "x.r.md").read_bytes()
    _one_line_refusal([src.rename(tmp_path / "x.onnx"), out / "x.r.md", "--out-dir", out, "--report", "r.md"], capfd,
                      "never overwrites its input")
    assert sorted(p.name for p in out.iterdir()) == ["x.r.md"] and (out / "x.r.md").read_bytes() == before


def test_batch_with_distinct_names_still_runs(src, tmp_path, capfd):
    (tmp_path / "b").mkdir()
    shutil.copy(src, tmp_path / "b" / "n.onnx")
    out = tmp_path / "out"
    out.mkdir()
    assert main([str(src), str(tmp_path / "b" / "n.onnx"), "--out-dir", str(out), "--report", "r.md", "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["m.onnx", "m.r.md", "n.onnx", "n.r.md"]


# ------------------------------------------------------------------ signals and pipes
def test_sigterm_to_the_process_group_of_check_jobs_is_one_line(tmp_path):
    """``kill -TERM -PGID`` (a CI job cancelled, a container stopped) reaches the workers too;
    at any moment the run ends 143 with "graphfix: terminated" and nothing else: no traceback
    from the pool's thread, no leaked-semaphore warning from the resource tracker."""
    models = tmp_path / "models"
    models.mkdir()
    for k in range(6):
        shutil.copy(ROOT / "fixtures" / "demo" / "superglue_matcher.onnx", models / f"m{k}.onnx")
    for delay in (0.6, 1.0, 1.4, 1.8, 2.4):
        proc = subprocess.Popen([sys.executable, "-m", "graphfix", "check", str(models), "--trt", "8.0,8.6", "--jobs", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        if proc.returncode == 0:  # finished first
            continue
        assert proc.returncode == 143 and err == "graphfix: terminated\n", (delay, err)


@pytest.mark.parametrize("extra", [[], ["--markdown"]])
def test_passes_piped_into_head_exits_141_every_time(extra):
    """The README promises 141, as a process killed by SIGPIPE (``yes | head -1``): the output
    fits in the pipe, so written in one go it ended 0 or 141 by chance."""
    command = " ".join([sys.executable, "-m", "graphfix", "passes", *extra])
    for _ in range(3):
        proc = subprocess.run(["bash", "-c", f"{command} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"],
                              capture_output=True, text=True, env=ENV, timeout=120)
        assert proc.stdout.strip() == "141" and proc.stderr == "", proc


def test_passes_read_to_the_end_exits_0_and_loses_nothing():
    whole = subprocess.run([sys.executable, "-m", "graphfix", "passes", "--markdown"], capture_output=True, text=True,
                           env=ENV, timeout=120)
    assert whole.returncode == 0 and whole.stdout.startswith("# Pass reference\n") and whole.stdout.endswith("\n")
    piped = subprocess.run(["bash", "-c", f"{sys.executable} -m graphfix passes --markdown | cat; exit ${{PIPESTATUS[0]}}"],
                           capture_output=True, text=True, env=ENV, timeout=120)
    assert piped.returncode == 0 and piped.stdout == whole.stdout


@pytest.mark.parametrize("exc", [MemoryError(), OSError(12, "Cannot allocate memory")])
def test_running_out_of_memory_is_one_line_and_exit_2(exc, capsys):
    """A MemoryError, or the kernel refusing a map or the worker process under a memory cap (ENOMEM;
    the fuzz's case 0 under its address-space cap), is the out-of-memory line, not an internal error."""
    assert exit_code(exc, verbose=False) == 2
    assert capsys.readouterr().err.strip() == "graphfix: error: out of memory (the model or its inputs are too large for this machine)"
