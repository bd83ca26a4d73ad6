"""A signal during verification ends the run (130/143, nothing written). It used to arrive inside
polygraphy's ``IterationResult.__init__``, whose ``LazyModule.is_installed`` has a bare ``except:``
that swallowed it; comparisons no longer build results that way (graphfix.verify.compare's
numpy rule, issue 33), so the signal is sent from inside the comparison itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo" / "superglue_matcher.onnx"

#: Sends the signal from inside the first comparison of a verification run.
SCRIPT = """
import os, signal, sys
from graphfix.verify import compare
real, state = compare._numpy_diff, {"done": False}
def diff(*a, **k):
    if not state["done"]:
        state["done"] = True
        print("SENT", file=sys.stderr)
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    return real(*a, **k)
compare._numpy_diff = diff
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
    assert "SENT" in proc.stderr  # the signal really arrived inside the comparison
    assert proc.returncode == code, proc.stderr
    assert f"graphfix: {word}" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.py"]  # nothing written, no temp left
