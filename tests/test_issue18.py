"""Issue 18: the 13 ways an audit still broke graphfix's file and error promises, one test (or a
few) per cause, each named ``test_<cause>_...``; the "Also" items at the end.

Refusals are checked as in test_safety.py: exit 2, one line on stderr, the folder unchanged.
"""

from __future__ import annotations

import json
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
from test_safety import ROOT, refused, run, save

from fixtures.recipes._onnx import FLOAT, inp, model, node, out


def _string_attribute_model(op: str) -> onnx.ModelProto:
    """A Pad whose mode, or a Conv whose auto_pad, is a byte string that is not UTF-8."""
    if op == "Pad":
        m = model([node("Pad", ["x", "p"], ["y"], mode="reflect")], [inp("x", FLOAT, [1, 3, 4, 4])], [out("y", FLOAT, [1, 3, 6, 6])],
                  [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "p")])
        m.graph.node[0].attribute[0].s = b"\xf2\x80refl"
        return m
    m = model([node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")], [inp("x", FLOAT, [1, 1, 4, 4])], [out("y", FLOAT, [1, 1, 4, 4])],
              [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")])
    m.graph.node[0].attribute[0].s = b"SAME\xffUPPER"
    return m


# ============================================================ 1. string attributes not UTF-8
@pytest.mark.parametrize("op,attr", [("Pad", "mode"), ("Conv", "auto_pad")])
def test_1_string_attribute_not_utf8_is_refused_by_every_command(op, attr, tmp_path, capfd):
    src = save(_string_attribute_model(op), tmp_path / "in.onnx")
    log = tmp_path / "build.log"
    log.write_text("[E] [TRT] ModelImporter.cpp:771: While parsing node number 0 [Pad -> \"y\"]:\n")
    expect = ("in.onnx", f"attribute '{attr}'", "not valid UTF-8")
    refused([src, tmp_path / "out.onnx"], capfd, tmp_path, expect)
    refused(["check", src, "--trt", "8.6"], capfd, tmp_path, expect)
    refused(["explain", log, "--model", src], capfd, tmp_path, expect)


# ============================================================ 2. Pad with pads shorter than 2 x rank
def _short_pads_model() -> onnx.ModelProto:
    """``Constant([1]) -> Pad(x: [b, s])``: two pads short (unchecked: onnx's inference rejects it)."""
    g = helper.make_graph([node("Constant", [], ["p"], value=numpy_helper.from_array(np.array([1], np.int64))),
                           node("Pad", ["x", "p"], ["y"])], "g", [inp("x", FLOAT, ["b", "s"])], [out("y", FLOAT, ["b", "t"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_2_pad_with_short_pads_is_a_finding_not_a_crash(tmp_path, capfd):
    src = save(_short_pads_model(), tmp_path / "in.onnx")
    rc, text, err = run(["check", src, "--trt", "7.2"], capfd)
    assert rc == 1 and "Traceback" not in err and not err, err
    assert "Pad" in text
    rc, _, err = run([src, tmp_path / "out.onnx", "--trt", "7.2", "--no-verify", "--quiet",
                      "--report", tmp_path / "r.json"], capfd)
    assert rc == 4 and "Traceback" not in err, err  # written; TensorRT 7.2 still rejects the Pad it could not rewrite


    report = json.loads((tmp_path / "r.json").read_text())
    assert "pads hold 1 value(s)" in json.dumps(report)


# ============================================================ 3. a STRING graph input, unverified
def test_3_string_input_without_verification(tmp_path, capfd):
    m = onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx"))
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    src = save(m, tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / "out.onnx", "--no-verify", "--quiet"], capfd)
    assert rc == 0, err
    onnx.checker.check_model(onnx.load(str(tmp_path / "out.onnx")))


# ============================================================ 4. external-data keys not UTF-8
def test_4_external_data_key_not_utf8(tmp_path, capfd):
    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    m = model([node("MatMul", ["x", "w"], ["y"])], [inp("x", FLOAT, [2, 16])], [out("y", FLOAT, [2, 16])], [w])
    onnx.save_model(m, str(tmp_path / "in.onnx"), save_as_external_data=True, location="in.data", size_threshold=0)
    m = onnx.load(str(tmp_path / "in.onnx"), load_external_data=False)
    for key in ("k", "j"):  # onnx sorts unknown keys for its warning: str next to bytes fails
        entry = m.graph.initializer[0].external_data.add()
        entry.key, entry.value = key, "1"
    data = m.SerializeToString().replace(b"\x0a\x01j", b"\x0a\x01\xff")
    (tmp_path / "in.onnx").write_bytes(data)
    expect = ("in.onnx", "tensor 'w'", "not valid UTF-8")
    refused([tmp_path / "in.onnx", tmp_path / "out.onnx"], capfd, tmp_path, expect)
    refused(["check", tmp_path / "in.onnx", "--trt", "8.6"], capfd, tmp_path, expect)


# ============================================================ 11. lines that are not graphfix's
def _with_local_function(src: Path) -> Path:
    """A model with a model-local function (imported by onnx-graphsurgeon's own importer) whose
    Clip bounds fold-clip rewrites (new node names are handed out)."""
    m = onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx"))
    m.functions.append(helper.make_function("local", "Unused", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                            [helper.make_opsetid("", 17)]))
    m.opset_import.append(helper.make_opsetid("local", 1))
    return save(m, src)


def test_11_quiet_run_prints_nothing_but_graphfix(tmp_path):
    """HOME unwritable (onnxruntime's telemetry warns at import), a graph onnx-graphsurgeon
    imported (its logger warns about colours and unregistered functions on stdout)."""
    src = _with_local_function(tmp_path / "in.onnx")
    env = {**os.environ, "HOME": "/dev/null", "PYTHONPATH": str(ROOT)}
    env.pop("XDG_CACHE_HOME", None)
    quiet = subprocess.run([sys.executable, "-m", "graphfix", src, tmp_path / "out.onnx", "--quiet"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "", quiet
    loud = subprocess.run([sys.executable, "-m", "graphfix", src, tmp_path / "out2.onnx"],
                          capture_output=True, text=True, env=env, timeout=300)
    said = [line for line in loud.stderr.splitlines() if not re.match(r"graphfix: .* \.\.\. \d+\.\ds$", line)]  # phase lines
    assert loud.returncode == 0 and said == [f"wrote {tmp_path / 'out2.onnx'}"], loud
    assert not [line for line in loud.stdout.splitlines() if line.startswith(("[W]", "[E]", "[I]"))], loud.stdout


def test_11_builder_names_on_a_graph_graphfix_did_not_import(capfd):
    import onnx_graphsurgeon as gs

    from graphfix.graph.build import Builder

    assert Builder(gs.Graph(opset=17)).name("x")
    assert capfd.readouterr() == ("", "")


# ============================================================ 12. the reader closes the pipe
@pytest.mark.parametrize("command", [["passes"], ["check", ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx", "--trt", "7.2"]])
def test_12_closed_stdout_is_a_normal_end(command):
    """``graphfix passes | head -1``: the reader is gone before graphfix writes (closed here at
    once, so the write fails every time): exit 141 as SIGPIPE would give, nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "graphfix", *map(str, command)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141 and err == "", err


# ============================================================ 13. explain on a FIFO
TRT_LOG = '[E] [TRT] ModelImporter.cpp:771: ERROR: builtin_op_importers.cpp:1234 In function importClip:\n' \
          '[8] Assertion failed: inputs.at(1).is_weights() && "Clip min value must be an initializer!"\n'


def test_13_explain_fifo_without_a_writer_is_refused_at_once(tmp_path):
    fifo = tmp_path / "build.log"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "graphfix", "explain", fifo], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [f"graphfix: error: {fifo}: a FIFO with no writer: start the program that writes "
                                        "the log first, or pipe the log into 'graphfix explain -'"]


def test_13_explain_reads_a_fifo_that_has_a_writer(tmp_path, capfd):
    import threading

    fifo = tmp_path / "build.log"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as fh:  # blocks until explain opens the other end
            time.sleep(0.2)  # explain finds a writer that has not written yet
            fh.write(TRT_LOG)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    time.sleep(0.5)  # the writer is waiting in open() for a reader, as `trtexec > fifo &` would be
    try:
        rc, text, err = run(["explain", fifo], capfd)
    finally:
        writer.join(timeout=10)
    assert rc == 0 and "clip" in text.lower(), (text, err)


# ============================================================ also: report extensions, --trt typos
@pytest.mark.parametrize("name,got", [("r.txt", "'.txt'"), ("report", "no extension"), ("r.JSON", "'.JSON'")])
def test_also_unknown_report_extension_is_refused(name, got, tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    refused([src, tmp_path / "out.onnx", "--report", tmp_path / name], capfd, tmp_path,
            (name, got, ".json (JSON, plus polygraphy inputs/outputs files), .md (Markdown)"))


@pytest.mark.parametrize("command", ["fix", "check"])
def test_also_trt_version_typo_is_refused_with_the_known_releases(command, tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    args = [src, tmp_path / "out.onnx"] if command == "fix" else ["check", src]
    refused([*args, "--trt", "86"], capfd, tmp_path, ("--trt 86", "no such TensorRT release", "8.6, 9.0", "11.1"))
    rc, _, err = run(["check", src, "--trt", "12.0"], capfd)  # the next major is a plausible release
    assert rc in (0, 1) and not err, err


# ============================================================ 5. long names
def _name(n: int, suffix: str = ".onnx") -> str:
    return "o" * (n - len(suffix)) + suffix


@pytest.mark.parametrize("n", [250, 251, 255])
def test_5_every_legal_output_name_is_written(n, tmp_path, capfd):
    """The temp, backup and lock names beside a long target are shortened (with a hash)."""
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / _name(n), "--quiet"], capfd)
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.onnx", _name(n)])


def test_5_names_too_long_are_refused_before_any_work(tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    refused([src, tmp_path / _name(256)], capfd, tmp_path, ("output file name is 256 bytes", "at most 255"))
    report = tmp_path / _name(250, ".json")  # its side file <stem>.inputs.json is 257 bytes
    refused([src, tmp_path / "out.onnx", "--report", report], capfd, tmp_path, (".inputs.json", "257 bytes"))


# ============================================================ 6-7. what is at the output path
def test_6_external_data_onto_a_fifo_or_device_is_refused(tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    os.mkfifo(tmp_path / "w.fifo")
    (tmp_path / "w.dev").symlink_to("/dev/null")
    refused([src, tmp_path / "out.onnx", "--external-data", "w.fifo"], capfd, tmp_path, ("w.fifo", "not a regular file (a FIFO)"))
    refused([src, tmp_path / "out.onnx", "--external-data", "w.dev"], capfd, tmp_path, ("w.dev", "a character device"))
    assert stat.S_ISFIFO(os.stat(tmp_path / "w.fifo").st_mode) and os.readlink(tmp_path / "w.dev") == "/dev/null"


def test_6_the_writer_itself_never_replaces_a_fifo(tmp_path):
    from graphfix.atomic import write_atomic
    from graphfix.errors import GraphfixError

    os.mkfifo(tmp_path / "w.data")
    with pytest.raises(GraphfixError, match="not a regular file"):
        write_atomic(tmp_path / "w.data", b"x")
    assert stat.S_ISFIFO(os.stat(tmp_path / "w.data").st_mode) and sorted(os.listdir(tmp_path)) == ["w.data"]


@pytest.mark.parametrize("flag", [None, "--report"])
def test_7_symlink_loop_as_output_is_refused(flag, tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    (tmp_path / "o1.json").symlink_to(tmp_path / "o2.json")
    (tmp_path / "o2.json").symlink_to(tmp_path / "o1.json")
    args = [src, tmp_path / "o1.json"] if flag is None else [src, tmp_path / "out.onnx", flag, tmp_path / "o1.json"]
    refused(args, capfd, tmp_path, ("o1.json", "symlink loop"))
    assert os.readlink(tmp_path / "o1.json") == str(tmp_path / "o2.json")


# ============================================================ 8-10. killed and raced commits
def _versions(folder: Path) -> dict[str, float]:
    """Two models a and b whose weights (external data a.data / b.data) are all 1.0 / all 2.0:
    a model on disk with node 'a' must read only 1.0s, with node 'b' only 2.0s."""
    values = {"a": 1.0, "b": 2.0}
    for tag, value in values.items():
        m = model([node("MatMul", ["x", "w"], ["y"], name=tag)], [inp("x", FLOAT, [2, 64])], [out("y", FLOAT, [2, 64])],
                  [numpy_helper.from_array(np.full((64, 64), value, np.float32), "w")])
        onnx.save_model(m, str(folder / f"{tag}.onnx"), save_as_external_data=True, location=f"{tag}.data", size_threshold=0)
    return values


def _state(path: Path, values: dict[str, float]) -> str:
    """Which version the model at ``path`` is, after checking it reads its own weights."""
    m = onnx.load(str(path))  # loads the external data it names
    tag = m.graph.node[0].name
    weights = numpy_helper.to_array(m.graph.initializer[0])
    assert tag in values and np.all(weights == values[tag]), (tag, np.unique(weights))
    return tag


def _child(args: list, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "graphfix", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_8_killed_at_every_step_of_the_commit_the_model_reads_its_own_weights(tmp_path, capfd):
    """out.onnx + out.onnx.data from model a exist; a run writing model b is SIGKILLed before each
    step of its commit in turn (backups, renames, links, removals). After every kill out.onnx is a
    or b with its own weights; the next run removes what the killed one left (cause 10)."""
    values = _versions(tmp_path)
    previous = tmp_path / "previous"
    previous.mkdir()
    rc, _, err = run([tmp_path / "a.onnx", previous / "out.onnx", "--external-data", "out.onnx.data", "--no-verify", "--quiet"], capfd)
    assert rc == 0, err
    seen, k = [], 0
    while True:
        k += 1
        work = tmp_path / f"k{k}"
        work.mkdir()
        for name in ("out.onnx", "out.onnx.data"):
            (work / name).write_bytes((previous / name).read_bytes())
        steps = tmp_path / f"steps{k}.txt"
        proc = _child([tmp_path / "b.onnx", work / "out.onnx", "--external-data", "out.onnx.data", "--no-verify", "--quiet"],
                      GRAPHFIX_TEST_KILL_AT=str(k), GRAPHFIX_TEST_STEPS=str(steps))
        _, err = proc.communicate(timeout=300)
        seen.append(_state(work / "out.onnx", values))
        if proc.returncode == 0:  # no step k: the run finished
            assert not [p for p in work.iterdir() if p.name not in ("out.onnx", "out.onnx.data")]
            break
        assert proc.returncode == -signal.SIGKILL, err
        rc, _, err = run([tmp_path / "b.onnx", work / "out.onnx", "--external-data", "out.onnx.data", "--no-verify", "--quiet"], capfd)
        assert rc == 0, err
        assert sorted(p.name for p in work.iterdir()) == ["out.onnx", "out.onnx.data"], (k, steps.read_text())
        assert _state(work / "out.onnx", values) == "b"
    assert k >= 6 and "a" in seen and seen[-1] == "b", seen  # the kills spanned the commit


@pytest.mark.parametrize("pause_at,step", [(2, "back up out.onnx"), (6, "-> out.onnx")])
def test_9_two_runs_writing_the_same_output_install_one_after_the_other(pause_at, step, tmp_path):
    """Run a pauses for 2 s inside its commit (after its weights went to their interim name, or
    to out.onnx.data just before its model is renamed); run b, started meanwhile, waits for a's
    lock: out.onnx and out.onnx.data end as one run's, and b's (it committed last)."""
    values = _versions(tmp_path)
    for tag in values:  # out.onnx exists: the runs take the interim-name path
        rc = subprocess.run([sys.executable, "-m", "graphfix", tmp_path / f"{tag}.onnx", tmp_path / "out.onnx",
                             "--external-data", "out.onnx.data", "--no-verify", "--quiet"],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300).returncode
        assert rc == 0
    steps = tmp_path / "steps_a.txt"
    a = _child([tmp_path / "a.onnx", tmp_path / "out.onnx", "--external-data", "out.onnx.data", "--no-verify", "--quiet"],
               GRAPHFIX_TEST_PAUSE_AT=f"{pause_at}:2", GRAPHFIX_TEST_STEPS=str(steps))
    deadline = time.monotonic() + 120
    while not (steps.exists() and len(steps.read_text().splitlines()) >= pause_at):
        assert time.monotonic() < deadline and a.poll() is None, a.communicate()
        time.sleep(0.02)
    assert step in steps.read_text().splitlines()[pause_at - 1]
    b = _child([tmp_path / "b.onnx", tmp_path / "out.onnx", "--external-data", "out.onnx.data", "--no-verify", "--quiet"])
    for proc in (a, b):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    assert _state(tmp_path / "out.onnx", values) == "b"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out") or p.name.startswith(".")) == \
        ["out.onnx", "out.onnx.data"]


def test_10_temps_of_dead_runs_are_removed_by_the_next_run(tmp_path, capfd):
    src = save(onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx")), tmp_path / "in.onnx")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = [f".out.onnx.{dead.pid}.abcd1234.tmp", f".out.onnx.{dead.pid}.abcd1234.bak"]
    kept = [f".out.onnx.{os.getppid()}.abcd1234.tmp",  # a live process's
            f".other.onnx.{dead.pid}.abcd1234.tmp",  # another target's
            f"out.onnx.{dead.pid}.abcd1234.new"]  # interim weights are removed only once no model names them
    for name in stale + kept:
        (tmp_path / name).write_bytes(b"x" * 1000)
    rc, _, err = run([src, tmp_path / "out.onnx", "--quiet"], capfd)
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.onnx", "out.onnx", *kept])
