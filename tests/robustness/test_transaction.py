"""A run's files appear together or not at all: a failure (a report that cannot be written, an
engine build that fails) takes everything back, a run killed at any step of the commit leaves a
model that reads its own weights, two runs on one output install one after the other, and the
temporary files of dead runs are removed by the next run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from graphfix.errors import GraphfixError
from graphfix.fs import transaction
from tests.helpers.cli_runs import IS_ROOT, ROOT, refused, run, save


def test_report_that_is_a_directory_is_refused(src, tmp_path, capfd):
    (tmp_path / "reports").mkdir()
    refused([src, tmp_path / "out.onnx", "--report", tmp_path / "reports"], capfd, tmp_path, "is a directory")


def test_report_into_an_unwritable_directory_is_refused(src, tmp_path, capfd):
    if IS_ROOT:
        bad = Path("/sys/graphfix-report.json")  # root may write anywhere but sysfs
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        bad = locked / "r.json"
    refused([src, tmp_path / "out.onnx", "--report", bad], capfd, tmp_path, "not writable")


def test_failure_while_writing_reports_removes_the_model(src, tmp_path, capfd, monkeypatch):
    """The last write fails (disk full): the model already renamed into place is taken back."""
    import graphfix.fs.transaction as atomic

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


def test_build_without_tensorrt_is_refused_before_any_work(src, tmp_path, capfd, monkeypatch):
    from graphfix import engine

    monkeypatch.setattr(engine, "tensorrt_available", lambda: False)
    refused([src, tmp_path / "out.onnx", "--build", tmp_path / "m.engine"], capfd, tmp_path, "TensorRT is not installed")


@pytest.mark.parametrize("fails", [False, True])
def test_engine_build_failure_takes_everything_back(fails, src, tmp_path, capfd, monkeypatch):
    from graphfix import engine

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


def test_killed_at_every_step_of_the_commit_the_model_reads_its_own_weights(tmp_path, capfd):
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
def test_two_runs_writing_the_same_output_install_one_after_the_other(pause_at, step, tmp_path):
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


def test_temps_of_dead_runs_are_removed_by_the_next_run(tmp_path, capfd):
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


def test_big_file_is_synced_as_it_is_written_and_whole(tmp_path, monkeypatch):
    """Background syncs every SYNC_EVERY bytes (here: every second 700-byte write), then the last
    one before the rename; the file is the data."""
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(transaction, "SYNC_EVERY", 1000)
    monkeypatch.setattr(transaction.os, "fdatasync", lambda fd: (synced.append(fd), real(fd)))
    data = os.urandom(10_500)
    target = tmp_path / "out.bin"
    transaction.write_atomic(target, lambda fh: [fh.write(data[k:k + 700]) for k in range(0, len(data), 700)])
    assert target.read_bytes() == data
    assert len(synced) == 7  # the sizes seen are racy: the writes go on while a sync runs


def test_failed_background_sync_is_a_one_line_error_and_writes_nothing(tmp_path, monkeypatch):
    def broken(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(transaction, "SYNC_EVERY", 1000)
    monkeypatch.setattr(transaction.os, "fdatasync", broken)
    with pytest.raises(GraphfixError, match="Input/output error"):
        transaction.write_atomic(tmp_path / "out.bin", lambda fh: [fh.write(b"x" * 700) for _ in range(5)])
    assert list(tmp_path.iterdir()) == []
