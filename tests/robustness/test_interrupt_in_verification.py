"""A signal during verification ends the run (130/143, nothing written) even where a library
swallows the exception: polygraphy's ``LazyModule.is_installed`` has a bare ``except:`` and is
called from ``IterationResult.__init__`` inside every comparison."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo" / "superglue_matcher.onnx"

#: Sends the signal from inside polygraphy's bare ``try/except`` (its find_spec call on 'torch')
#: while it builds the first result of a verification run.
SCRIPT = """
import importlib.util, os, signal, sys
real, state = importlib.util.find_spec, {"armed": False, "done": False}
def find_spec(name, *a, **k):
    if name == "torch" and state["armed"]:
        state["armed"] = False
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    return real(name, *a, **k)
importlib.util.find_spec = find_spec
from polygraphy.comparator import struct
init = struct.IterationResult.__init__
def armed_init(self, outputs=None, *a, **k):
    if outputs and not state["done"]:
        state["armed"] = state["done"] = True
    init(self, outputs, *a, **k)
    if state["done"] and not state["armed"]:
        print("SENT", file=sys.stderr)
struct.IterationResult.__init__ = armed_init
from graphfix.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("sig,code,word", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_signal_swallowed_by_polygraphy_still_ends_the_run(tmp_path, sig, code, word):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(script), sig, str(DEMO), str(out), "--report", str(report), "--quiet"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "SENT" in proc.stderr  # the signal really arrived inside polygraphy's comparison
    assert proc.returncode == code, proc.stderr
    assert f"graphfix: {word}" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.py"]  # nothing written, no temp left
