"""SIGINT/SIGTERM at any moment of a run end it with 130/143 and one line, leaving the folder as it
was, or, once the final renames began, finish them cleanly; a signal inside the API's writer
reaches the caller's own handler.
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
from tests.helpers.cli_runs import ROOT, run, save, snapshot


def _signal_during(stage: str, sig: int, monkeypatch):
    """Deliver ``sig`` to this process at a point inside the writer."""
    import graphfix.fs.transaction as atomic

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
def test_signal_while_writing_leaves_nothing(sig, rc, word, src, tmp_path, capfd, monkeypatch):
    fired = _signal_during("staging", sig, monkeypatch)
    before = snapshot(tmp_path)
    got, _, err = run([src, tmp_path / "out.onnx", "--report", tmp_path / "r.json", "--quiet"], capfd)
    assert fired and got == rc, err
    assert err.strip().splitlines() == [f"graphfix: {word}"]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_the_final_renames_finishes_cleanly(sig, src, tmp_path, capfd, monkeypatch):
    fired = _signal_during("commit", sig, monkeypatch)
    rc, _, err = run([src, tmp_path / "out.onnx", "--report", tmp_path / "r.json", "--quiet"], capfd)
    assert fired and rc == 0, err
    assert "interrupted" not in err and "terminated" not in err
    onnx.checker.check_model(onnx.load(str(tmp_path / "out.onnx")))
    json.loads((tmp_path / "r.json").read_text())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_interrupt_before_any_work_is_one_line(tmp_path, capfd, monkeypatch):
    import graphfix.cli.main as cli

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", boom)
    rc, _, err = run([tmp_path / "in.onnx", tmp_path / "out.onnx"], capfd)
    assert rc == 130 and err.strip().splitlines() == ["graphfix: interrupted"]


def test_signal_inside_the_api_writer_reaches_the_callers_handler(tmp_path, monkeypatch):
    """A library caller's SIGTERM handler gets the signal once the temp file is gone."""
    import graphfix.fs.transaction as atomic

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
import graphfix.cli.main
print("ready", flush=True)
sys.argv[1:] = {args!r}
sys.exit(graphfix.cli.main.main())  # what the console script does
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
def test_signals_at_any_moment_in_a_real_process(sig, code, word, tmp_path):
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
