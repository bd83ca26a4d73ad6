"""Issue 9: every hostile path and option is refused before any work, nothing is left behind,
no tracebacks. Each test names the numbered item of the issue it covers.

Every refusal test checks the same three things: exit 2, exactly one line on stderr (captured at
the file-descriptor level, so onnxruntime's C++ log would show), and the folder byte-for-byte as
it was (no new file, no changed file, no temp file).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from graphfix.cli import main
from graphfix.errors import GraphfixError

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "fold_clip" / "superpoint_descriptor_norm.onnx"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


# ----------------------------------------------------------------------------- helpers
def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under root (hidden temp files included): content digest and mode."""
    snap = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            snap[str(p.relative_to(root))] = ("link:" + os.readlink(p), 0)
        elif p.is_file():
            st = p.stat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if st.st_size < 2**26 else f"{st.st_size}@{st.st_mtime_ns}"
            snap[str(p.relative_to(root))] = (digest, stat.S_IMODE(st.st_mode))
    return snap


#: What a run prints on a non-terminal stderr as each phase ends (graphfix.commands.fix._Progress).
PHASE_LINE = re.compile(r"^graphfix: .* \.\.\. \d+\.\ds$")


def run(args: list[str], capfd) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    captured = capfd.readouterr()
    return rc, captured.out, captured.err


def refused(args: list[str], capfd, root: Path, expect: str | tuple[str, ...]) -> str:
    """Exit 2, one stderr line containing every expected fragment, folder unchanged."""
    before = snapshot(root)
    rc, _, err = run(args, capfd)
    lines = [line for line in err.strip().splitlines() if not PHASE_LINE.match(line)]  # the phases it went through
    assert rc == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("graphfix: error: "), err
    for e in (expect,) if isinstance(expect, str) else expect:
        assert e in lines[0], lines[0]
    assert snapshot(root) == before
    return lines[0]


def save(m: onnx.ModelProto, p: Path) -> Path:
    p.write_bytes(m.SerializeToString())
    return p


def relu_model(elem_type: int = FLOAT, shape=(2, 3), opset: int = 17) -> onnx.ModelProto:
    return model([node("Identity", ["x"], ["y"])], [inp("x", elem_type, list(shape))], [out("y", elem_type, list(shape))], opset=opset)


def external_model(folder: Path, location: str = "in.data", name: str = "in.onnx") -> Path:
    """A MatMul whose weights live in an external data file (what torch writes for big models)."""
    folder.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    m = model([node("MatMul", ["x", "w"], ["y"])], [inp("x", FLOAT, [2, 64])], [out("y", FLOAT, [2, 64])], [w])
    onnx.save_model(m, str(folder / name), save_as_external_data=True, location="tmp.data", size_threshold=0)
    set_location(folder / name, location)
    target = Path(location) if os.path.isabs(location) else folder / location
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder / "tmp.data", target)
    return folder / name


def set_location(path: Path, location: str, **extra: str) -> None:
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
            elif e.key in extra:
                e.value = extra[e.key]
    path.write_bytes(m.SerializeToString())


@pytest.fixture
def src(tmp_path: Path) -> Path:
    p = tmp_path / "in.onnx"
    p.write_bytes(FIXTURE.read_bytes())
    return p


# ============================================================ 1. reports over the input / output
@pytest.mark.parametrize("which", ["input", "output"])
def test_1_report_onto_input_or_output_is_refused(which, src, tmp_path, capfd):
    dst = tmp_path / "out.onnx"
    if which == "output":
        dst.write_bytes(b"previous result")
    target = src if which == "input" else dst
    refused([src, dst, "--report", target], capfd, tmp_path, ("--report", which))


def test_1_report_onto_input_named_md(tmp_path, capfd):
    src = tmp_path / "in.md"
    src.write_bytes(FIXTURE.read_bytes())
    refused([src, tmp_path / "out.onnx", "--report", src], capfd, tmp_path, "never overwrites its input")


@pytest.mark.parametrize("spelling", ["dot", "dotdot", "symlink", "hardlink"])
def test_1_collisions_through_other_spellings(spelling, src, tmp_path, capfd, monkeypatch):
    (tmp_path / "sub").mkdir()
    if spelling == "dot":
        monkeypatch.chdir(tmp_path)
        same = "./in.onnx"
    elif spelling == "dotdot":
        same = str(tmp_path / "sub" / ".." / "in.onnx")
    elif spelling == "symlink":
        same = tmp_path / "sub" / "link.onnx"
        same.symlink_to(src)
    else:
        same = tmp_path / "sub" / "hard.onnx"
        os.link(src, same)
    refused([src, tmp_path / "out.onnx", "--report", same], capfd, tmp_path, "never overwrites its input")
    refused([src, same], capfd, tmp_path, "never overwrites its input")


@pytest.mark.parametrize("reports,expect", [
    (["r.json", "r.json"], "r.json"),
    (["r.json", "./r.json"], "r.json"),
    (["r.json", "r.inputs.json"], "r.inputs.json"),
    (["a.md", "out.onnx"], "out.onnx"),
])
def test_1_outputs_colliding_with_each_other(reports, expect, src, tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [src, "out.onnx"]
    for r in reports:
        args += ["--report", r]
    refused(args, capfd, tmp_path, expect)


def test_1_report_sidecar_onto_load_inputs(src, tmp_path, capfd):
    assert main([str(src), str(tmp_path / "a.onnx"), "--report", str(tmp_path / "r.json"), "--quiet"]) == 0
    capfd.readouterr()
    refused([src, tmp_path / "b.onnx", "--load-inputs", tmp_path / "r.inputs.json", "--report", tmp_path / "r.json"],
            capfd, tmp_path, "r.inputs.json")


# ============================================================ 2. external data
def test_2_output_onto_the_inputs_weights(tmp_path, capfd):
    src = external_model(tmp_path)
    line = refused([src, tmp_path / "in.data"], capfd, tmp_path, ("in.data", "external data"))
    assert "never overwrites" in line


def test_2_report_onto_the_inputs_weights(tmp_path, capfd):
    src = external_model(tmp_path)
    refused([src, tmp_path / "out.onnx", "--report", tmp_path / "in.data"], capfd, tmp_path, ("in.data", "external data"))


def test_2_default_external_data_output_onto_the_inputs_weights(tmp_path, capfd):
    """`out.onnx` may get its weights in `out.onnx.data`: that name must not be the input's weights."""
    src = external_model(tmp_path, location="out.onnx.data")
    refused([src, tmp_path / "out.onnx"], capfd, tmp_path, "out.onnx.data")


def test_2_external_data_option_collisions(tmp_path):
    from graphfix.paths import plan_fix

    src = external_model(tmp_path)
    with pytest.raises(GraphfixError, match="never overwrites its input"):
        plan_fix(src, tmp_path / "out.onnx", external_data="in.data")
    with pytest.raises(GraphfixError, match="outside the output's folder"):
        plan_fix(src, tmp_path / "out.onnx", external_data="../w.data")
    with pytest.raises(GraphfixError, match="report"):
        plan_fix(src, tmp_path / "out.onnx", reports=[tmp_path / "w.data"], external_data="w.data")
    plan = plan_fix(src, tmp_path / "out.onnx", external_data="w.data")
    assert tmp_path / "w.data" in plan.write_paths() and tmp_path / "in.data" in plan.read_paths()


def test_2_external_data_model_still_fixes(tmp_path, capfd):
    src = external_model(tmp_path)
    rc, _, err = run([src, tmp_path / "out.onnx", "--quiet"], capfd)
    assert rc == 0, err


# ============================================================ 3. nothing left behind
def test_3_report_is_a_directory(src, tmp_path, capfd):
    (tmp_path / "reports").mkdir()
    refused([src, tmp_path / "out.onnx", "--report", tmp_path / "reports"], capfd, tmp_path, "is a directory")


def test_3_report_into_unwritable_directory(src, tmp_path, capfd):
    if IS_ROOT:
        bad = Path("/sys/graphfix-report.json")  # root may write anywhere but sysfs
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        bad = locked / "r.json"
    refused([src, tmp_path / "out.onnx", "--report", bad], capfd, tmp_path, "not writable")


def test_3_failure_while_writing_reports_removes_the_model(src, tmp_path, capfd, monkeypatch):
    """The last write fails (disk full): the model already renamed into place is taken back."""
    import graphfix.atomic as atomic

    old = tmp_path / "out.onnx"
    old.write_bytes(b"the previous output")
    real = os.replace

    def flaky(a, b):
        if str(b).endswith(".md"):
            raise OSError(28, "No space left on device")
        return real(a, b)

    monkeypatch.setattr(atomic.os, "replace", flaky)
    refused([src, old, "--report", tmp_path / "r.json", "--report", tmp_path / "r.md"], capfd, tmp_path,
            ("r.md", "No space left"))


def test_3_build_without_tensorrt_is_refused_before_any_work(src, tmp_path, capfd, monkeypatch):
    from graphfix.trt import engine

    monkeypatch.setattr(engine, "tensorrt_available", lambda: False)
    refused([src, tmp_path / "out.onnx", "--build", tmp_path / "m.engine"], capfd, tmp_path, "TensorRT is not installed")


# ============================================================ 4. signals
def _signal_during(stage: str, sig: int, monkeypatch):
    """Deliver ``sig`` to this process at a point inside the writer."""
    import graphfix.atomic as atomic

    fired = []
    if stage == "staging":
        real = atomic.os.fsync

        def hook(fd):
            real(fd)
            if not fired:
                fired.append(1)
                os.kill(os.getpid(), sig)
                time.sleep(0.05)

        monkeypatch.setattr(atomic.os, "fsync", hook)
    else:
        real_replace = atomic.os.replace

        def hook(a, b):
            real_replace(a, b)
            if not fired and not str(b).endswith(".bak"):
                fired.append(1)
                os.kill(os.getpid(), sig)
                time.sleep(0.05)

        monkeypatch.setattr(atomic.os, "replace", hook)
    return fired


@pytest.mark.parametrize("sig,rc,word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_4_signal_while_writing_leaves_nothing(sig, rc, word, src, tmp_path, capfd, monkeypatch):
    fired = _signal_during("staging", sig, monkeypatch)
    before = snapshot(tmp_path)
    got, _, err = run([src, tmp_path / "out.onnx", "--report", tmp_path / "r.json", "--quiet"], capfd)
    assert fired and got == rc, err
    assert err.strip().splitlines() == [f"graphfix: {word}"]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_4_signal_during_the_final_renames_finishes_cleanly(sig, src, tmp_path, capfd, monkeypatch):
    fired = _signal_during("commit", sig, monkeypatch)
    rc, _, err = run([src, tmp_path / "out.onnx", "--report", tmp_path / "r.json", "--quiet"], capfd)
    assert fired and rc == 0, err
    assert "interrupted" not in err and "terminated" not in err
    onnx.checker.check_model(onnx.load(str(tmp_path / "out.onnx")))
    json.loads((tmp_path / "r.json").read_text())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_4_interrupt_before_any_work_is_one_line(tmp_path, capfd, monkeypatch):
    import graphfix.cli as cli

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", boom)
    rc, _, err = run([tmp_path / "in.onnx", tmp_path / "out.onnx"], capfd)
    assert rc == 130 and err.strip().splitlines() == ["graphfix: interrupted"]


def test_4_signal_inside_the_api_writer_reaches_the_callers_handler(tmp_path, monkeypatch):
    """A library caller's SIGTERM handler gets the signal once the temp file is gone."""
    import graphfix.atomic as atomic

    class CallerSaw(Exception):
        pass

    def callers_handler(signum, frame):
        assert list(tmp_path.iterdir()) == []  # cleaned up before the caller hears of it
        raise CallerSaw(signum)

    previous = signal.signal(signal.SIGTERM, callers_handler)
    try:
        _signal_during("staging", signal.SIGTERM, monkeypatch)
        with pytest.raises(CallerSaw):
            atomic.write_atomic(tmp_path / "x.bin", b"x" * 100)
        assert signal.getsignal(signal.SIGTERM) is callers_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert list(tmp_path.iterdir()) == []


_CHILD = """
import sys
sys.path.insert(0, {root!r})
import graphfix.cli
print("ready", flush=True)
sys.argv[1:] = {args!r}
sys.exit(graphfix.cli.main())  # what the console script does
"""


def _spawn(args: list[str]) -> subprocess.Popen:
    code = _CHILD.format(root=str(ROOT), args=[str(a) for a in args])
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _big_model(path: Path) -> Path:
    """About 1.5 MB of weights, so writing takes a moment."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((640, 640)).astype(np.float32), "w")
    m = model([node("MatMul", ["x", "w"], ["m"]), node("Clip", ["m", "lo", "hi"], ["y"])],
              [inp("x", FLOAT, [1, 640])], [out("y", FLOAT, [1, 640])],
              [w, numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(1, np.float32), "hi")])
    return save(m, path)


@pytest.mark.parametrize("sig,code,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_4_signals_at_any_moment_in_a_real_process(sig, code, word, tmp_path):
    src = _big_model(tmp_path / "in.onnx")
    for delay in (0.02, 0.15, 0.4, 0.9):
        dst, rep = tmp_path / f"out{delay}.onnx", tmp_path / f"r{delay}.json"
        before = snapshot(tmp_path)
        proc = _spawn([src, dst, "--report", rep, "--quiet"])
        time.sleep(delay)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert "Traceback" not in err, err
        if proc.returncode == 0:  # finished before the signal, or finished cleanly after the renames
            onnx.checker.check_model(onnx.load(str(dst)))
            json.loads(rep.read_text())
        else:
            assert proc.returncode == code, err
            assert err.strip().splitlines() == [f"graphfix: {word}"]
            assert snapshot(tmp_path) == before
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ============================================================ 5. one line, exit 2
@pytest.mark.parametrize("kind,expect", [
    ("missing", ("in.data", "does not exist")),
    ("outside", ("../x.data", "outside the model's folder")),
    ("absolute", ("absolute path",)),
    ("short", ("in.data", "bytes")),
])
def test_5_bad_external_data(kind, expect, tmp_path, capfd):
    folder = tmp_path / "m"
    if kind == "missing":
        src = external_model(folder)
        (folder / "in.data").unlink()
    elif kind == "outside":
        src = external_model(folder, "../x.data")
    elif kind == "absolute":
        src = external_model(folder, str(tmp_path / "abs.data"))
    else:
        src = external_model(folder)
        set_location(src, "in.data", length=str(10**12))
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, expect)
    assert str(src) in line
    refused(["check", src, "--trt", "8.6"], capfd, tmp_path, expect)


@pytest.mark.parametrize("args,expect", [
    (["--iterations", "0"], "--iterations"),
    (["--iterations", "-3"], "--iterations"),
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2**32)], "--seed"),
    (["--input-shapes", "feat:1x4x100000x100000"], "2 GiB"),
    (["--input-shapes", "feat:1x4x400x400", "--iterations", "1000"], "2 GiB"),
    (["--val-range", "feat:[-1e999,1]"], "--val-range"),
])
def test_5_bad_numbers(args, expect, src, tmp_path, capfd):
    refused([src, tmp_path / "out.onnx", *args], capfd, tmp_path, expect)


@pytest.mark.parametrize("kind,expect", [
    ("string", ("'x'", "string")),
    ("bfloat16", ("'x'", "bfloat16")),
    ("float8", ("'x'", "float8")),
    ("complex64", ("'x'", "complex64")),
    ("sequence", ("'s'", "sequence")),
    ("optional", ("'o'", "optional")),
    ("huge", ("'x'", "2 GiB")),
])
def test_5_inputs_verification_cannot_feed(kind, expect, tmp_path, capfd):
    T = TensorProto
    if kind in ("string", "bfloat16", "float8", "complex64"):
        m = relu_model({"string": T.STRING, "bfloat16": T.BFLOAT16, "float8": T.FLOAT8E4M3FN, "complex64": T.COMPLEX64}[kind], opset=21)
    elif kind == "sequence":
        g = helper.make_graph([helper.make_node("SequenceAt", ["s", "i"], ["y"])], "g",
                              [helper.make_tensor_sequence_value_info("s", T.FLOAT, [2]), helper.make_tensor_value_info("i", T.INT64, [])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    elif kind == "optional":
        opt = helper.make_value_info("o", helper.make_optional_type_proto(helper.make_tensor_type_proto(T.FLOAT, [2])))
        g = helper.make_graph([helper.make_node("OptionalGetElement", ["o"], ["y"])], "g", [opt], [helper.make_tensor_value_info("y", T.FLOAT, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    else:
        m = relu_model(shape=(100000, 100000))
    src = save(m, tmp_path / "in.onnx")
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, expect)
    assert "Traceback" not in line
    if kind != "huge":
        assert "--no-verify" in line
        rc, _, err = run([src, tmp_path / "out.onnx", "--no-verify", "--quiet"], capfd)
        assert rc == 0, err


@pytest.mark.parametrize("elem", [TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT8, TensorProto.UINT16, TensorProto.BOOL])
def test_5_runnable_input_types_still_work(elem, tmp_path, capfd):
    src = save(relu_model(elem, opset=21), tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / "out.onnx", "--quiet"], capfd)
    assert rc == 0, err


def test_5_dev_zero_and_fifo_as_input(tmp_path, capfd):
    refused(["/dev/zero", tmp_path / "out.onnx"], capfd, tmp_path, ("/dev/zero", "not a regular file"))
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    refused([fifo, tmp_path / "out.onnx"], capfd, tmp_path, ("pipe.onnx", "not a regular file"))
    src = tmp_path / "in.onnx"
    src.write_bytes(FIXTURE.read_bytes())
    refused([src, tmp_path / "out.onnx", "--load-inputs", "/dev/zero"], capfd, tmp_path, ("/dev/zero", "not a regular file"))
    refused([src, tmp_path / "out.onnx", "--load-inputs", fifo], capfd, tmp_path, "not a regular file")


def test_5_model_file_over_2_gib(tmp_path, capfd):
    big = tmp_path / "big.onnx"
    with open(big, "wb") as fh:  # sparse: costs no disk
        fh.write(FIXTURE.read_bytes())
        fh.truncate(2**31 + 10)
    refused([big, tmp_path / "out.onnx"], capfd, tmp_path, ("big.onnx", "2 GiB", "external data"))


def test_5_external_data_length_that_does_not_match_the_dims(tmp_path, capfd):
    """Over 2 GiB of external data is fine (written as external data again); a length that does
    not match the tensor is a one-line refusal before any work."""
    src = external_model(tmp_path)
    with open(tmp_path / "in.data", "r+b") as fh:
        fh.truncate(2**31 + 10)
    set_location(src, "in.data", length=str(2**31 + 10 - 0))
    refused([src, tmp_path / "out.onnx"], capfd, tmp_path, ("length", "dims"))


def test_5_in_memory_model_over_2_gib_through_the_api(monkeypatch):
    """A ModelProto handed to the API that protobuf could not serialise (limit lowered to test)."""
    import graphfix
    import graphfix.paths as paths

    m = relu_model()
    monkeypatch.setattr(paths, "MAX_MODEL_BYTES", m.ByteSize() - 1)
    with pytest.raises(GraphfixError, match="2 GiB"):
        graphfix.fix(m)


# ============================================================ 6. messages that mislead
def test_6_sequence_output(tmp_path, capfd):
    g = helper.make_graph([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
                          [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)])
    src = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "in.onnx")
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, ("'s'", "sequence", "--no-verify"))
    assert "cannot run" not in line


def test_6_model_importing_only_ai_onnx_ml(tmp_path, capfd):
    g = helper.make_graph([helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml", norm="L2")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    src = save(helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)], ir_version=8), tmp_path / "in.onnx")
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, "ai.onnx.ml")
    assert "opset 1" not in line


def test_6_explain_a_directory_or_device(tmp_path, capfd):
    refused(["explain", tmp_path], capfd, tmp_path, "is a directory")
    refused(["explain", "/dev/zero"], capfd, tmp_path, "not a regular file")


# ============================================================ 7. one line, really
def test_7_onnxruntime_and_polygraphy_logs_stay_quiet(tmp_path, capfd):
    sh = numpy_helper.from_array(np.array([5, 7], np.int64), "sh")
    lo = numpy_helper.from_array(np.array(-1.0, np.float64), "lo")
    m = model([node("Reshape", ["x", "sh"], ["r"]), node("Cast", ["lo"], ["lof"], to=FLOAT),  # a Clip fold-clip rewrites:
               node("Clip", ["r", "lof"], ["y"])], [inp("x", FLOAT, [2, 3])], [out("y", FLOAT, [5, 7])], [sh, lo])  # verified
    src = save(m, tmp_path / "in.onnx")
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, "onnxruntime cannot run the input model")
    assert "\x1b[" not in line


# ============================================================ 8. file modes
@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_8_written_files_get_the_umask_mode(umask, src, tmp_path, capfd):
    old = os.umask(umask)
    try:
        rc, _, err = run([src, tmp_path / "out.onnx", "--report", tmp_path / "r.json", "--report", tmp_path / "r.md", "--quiet"], capfd)
    finally:
        os.umask(old)
    assert rc == 0, err
    for name in ("out.onnx", "r.json", "r.md", "r.inputs.json", "r.outputs.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name


def test_8_overwriting_keeps_the_existing_mode(src, tmp_path, capfd):
    dst = tmp_path / "out.onnx"
    dst.write_bytes(b"old")
    dst.chmod(0o640)
    rc, _, err = run([src, dst, "--quiet"], capfd)
    assert rc == 0, err
    assert stat.S_IMODE(dst.stat().st_mode) == 0o640 and dst.read_bytes() != b"old"


# ============================================================ 9. silent fallbacks
@pytest.mark.parametrize("value", ["", " , "])
def test_9_empty_pass_list(value, src, tmp_path, capfd):
    refused([src, tmp_path / "out.onnx", "--passes", value], capfd, tmp_path, "--passes")


def test_9_load_inputs_empty_list(src, tmp_path, capfd):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    refused([src, tmp_path / "out.onnx", "--load-inputs", empty], capfd, tmp_path, ("empty.json", "no input"))


@pytest.mark.parametrize("fmt", ["npz", "json"])
def test_9_load_inputs_with_wrong_dtype(fmt, src, tmp_path, capfd):
    feed = np.zeros((1, 4, 3, 3), np.int64)
    if fmt == "npz":
        path = tmp_path / "feeds.npz"
        np.savez(path, feat=feed)
    else:
        from polygraphy.json import save_json

        path = tmp_path / "feeds.json"
        save_json([{"feat": feed}], str(path))
    refused([src, tmp_path / "out.onnx", "--load-inputs", path], capfd, tmp_path, ("'feat'", "int64", "float32"))


def test_9_load_inputs_with_wrong_static_shape(src, tmp_path, capfd):
    path = tmp_path / "feeds.npz"
    np.savez(path, feat=np.zeros((1, 5, 3, 3), np.float32))
    refused([src, tmp_path / "out.onnx", "--load-inputs", path], capfd, tmp_path, ("'feat'", "shape"))


def test_9_api_refuses_the_same(src):
    import graphfix

    with pytest.raises(GraphfixError, match="no input"):
        graphfix.fix(src, inputs=[])
    with pytest.raises(GraphfixError, match="int64"):
        graphfix.fix(src, inputs=[{"feat": np.zeros((1, 4, 2, 2), np.int64)}])
    with pytest.raises(GraphfixError, match="passes"):
        graphfix.fix(src, passes="")
    with pytest.raises(GraphfixError, match="iterations"):
        graphfix.fix(src, iterations=0)


# ============================================================ 10. tolerances
@pytest.mark.parametrize("args", [["--atol", "nan"], ["--rtol", "nan"], ["--atol=-1e-3"], ["--rtol=-1"], ["--atol", "inf"]])
def test_10_bad_tolerances(args, src, tmp_path, capfd):
    refused([src, tmp_path / "out.onnx", *args], capfd, tmp_path, args[0].split("=")[0])


@pytest.mark.parametrize("kw", [{"atol": math.nan}, {"rtol": -1.0}, {"seed": -1}])
def test_10_api_bad_numbers(kw, src):
    import graphfix

    with pytest.raises(GraphfixError):
        graphfix.fix(src, **kw)


# ============================================================ 3. the engine build is part of the transaction
@pytest.mark.parametrize("fails", [False, True])
def test_3_engine_build_failure_takes_everything_back(fails, src, tmp_path, capfd, monkeypatch):
    from graphfix.trt import engine

    def fake_build(onnx_path, engine_path, feeds, reference, shapes=None, fp16=False, atol=1e-3, rtol=1e-3):
        assert Path(onnx_path).is_file()  # the model is on disk for TensorRT to parse
        Path(engine_path).write_bytes(b"engine")
        if fails:
            raise RuntimeError("[TRT] network has unsupported node")
        return {"engine": engine_path, "passed": True, "max_abs": 0.0, "outputs": {}}

    monkeypatch.setattr(engine, "tensorrt_available", lambda: True)
    monkeypatch.setattr(engine, "build_and_compare", fake_build)
    old = tmp_path / "out.onnx"
    old.write_bytes(b"the previous output")
    args = [src, old, "--build", tmp_path / "m.engine", "--report", tmp_path / "r.json"]
    if fails:
        refused(args, capfd, tmp_path, ("m.engine", "unsupported node", "nothing was written"))
    else:
        rc, out_text, err = run(args, capfd)
        assert rc == 0, err
        assert (tmp_path / "m.engine").read_bytes() == b"engine" and "engine " + str(tmp_path / "m.engine") in out_text
        assert json.loads((tmp_path / "r.json").read_text())["engine"]["engine"] == str(tmp_path / "m.engine")
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ============================================================ the API refuses what the CLI refuses
def test_api_save_and_save_report_never_overwrite_what_was_read(tmp_path):
    import graphfix

    src = external_model(tmp_path)
    result = graphfix.fix(src, output=tmp_path / "out.onnx")
    before = snapshot(tmp_path)
    for target in (src, tmp_path / "in.data", tmp_path / "./in.onnx"):
        with pytest.raises(GraphfixError, match="never overwrites its input"):
            result.save(target)
        with pytest.raises(GraphfixError, match="never overwrites its input"):
            result.save_report(target)
    with pytest.raises(GraphfixError, match="output"):
        result.save_report(tmp_path / "out.onnx")
    with pytest.raises(GraphfixError, match="is a directory"):
        graphfix.fix(src, output=tmp_path)
    assert snapshot(tmp_path) == before
    result.save_report(tmp_path / "r.json")
    # nothing was rewritten: no session ran, so there are no results for polygraphy side files
    assert result.report.sessions == 0 and {p.name for p in tmp_path.iterdir()} - set(before) == {"r.json"}


def test_api_load_inputs_from_a_file(src, tmp_path):
    import graphfix

    path = tmp_path / "feeds.npz"
    np.savez(path, feat=np.ones((1, 4, 3, 3), np.float32))
    assert graphfix.fix(src, inputs=path).outcome.feeds[0]["feat"].shape == (1, 4, 3, 3)
    with pytest.raises(GraphfixError, match="not a regular file"):
        graphfix.fix(src, inputs="/dev/zero")


def _corrupt(kind: str) -> onnx.ModelProto:
    """A MatMul model with one corruption a bit flip or a broken writer leaves parseable."""
    w = numpy_helper.from_array(np.ones((3, 3), np.float32), "w")
    m = model([node("MatMul", ["x", "w"], ["y"])], [inp("x", FLOAT, [1, 3])], [out("y", FLOAT, [1, 3])], [w])
    if kind == "initializer type":
        m.graph.initializer[0].data_type = 65
    elif kind == "declared type":
        m.graph.value_info.append(helper.make_tensor_value_info("y", FLOAT, [1, 3]))
        m.graph.value_info[0].type.tensor_type.elem_type = 77
    elif kind == "negative dim":
        m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = -3
    elif kind == "data size":
        m.graph.initializer[0].dims[0] = 4
    return m


@pytest.mark.parametrize("kind,says", [("initializer type", "tensor 'w' has an unknown element type (65)"),
                                       ("declared type", "value 'y' declares an unknown element type (77)"),
                                       ("negative dim", "input 'x' declares dimension -3"),
                                       ("data size", "tensor 'w' has dims [4, 3] (12 element(s)) but holds data for a different count"),
                                       ("producer bytes", "invalid model: model field producer_name (b'graphfix-\\x9e")])
def test_corrupt_but_parseable_models_are_one_line_errors(kind, says, tmp_path, capfd):
    src = tmp_path / "in.onnx"
    data = _corrupt(kind).SerializeToString()
    if kind == "producer bytes":  # a flipped byte in a string field: protobuf parses it, Python cannot decode it
        data = data.replace(b"graphfix-fixtures", b"graphfix-\x9e\xc4xtures")
    src.write_bytes(data)
    before = src.read_bytes()
    assert main([str(src), str(tmp_path / "out.onnx"), "--no-verify"]) == 2
    err = capfd.readouterr().err
    assert err.startswith(f"graphfix: error: {src}: invalid ") and says in err and len(err.strip().splitlines()) == 1
    assert src.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]
