"""What `graphfix fix` says while it works: a CI log (stderr not a terminal) gets one line per
phase with its time, so a long run shows where it went; a terminal gets a live status line that
goes on through verification; ``--quiet`` says nothing."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "fixtures" / "real" / "swin_dynamic_hw.onnx"
PHASE = re.compile(r"^graphfix: (.+) \.\.\. (\d+\.\d)s$")


def _cmd(tmp: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "graphfix", str(MODEL), str(tmp / "fixed.onnx"), "--passes", "auto", "--trt", "8.5", *extra]


ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _cli(tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(tmp, *extra), capture_output=True, text=True, env=ENV, timeout=300)


def test_one_line_per_phase_when_stderr_is_not_a_terminal(tmp_path):
    proc = _cli(tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    phases = [m.group(1) for m in map(PHASE.match, lines) if m]
    assert phases == ["loading the model", "checking the model for TensorRT 8.5", "importing the graph", "running passes",
                      "choosing verification inputs", "verification probe run on onnxruntime (10 regions)",
                      "comparing 10 regions", "end-to-end run of the fixed model",
                      "end-to-end run under onnxruntime's default settings", "exporting the fixed model",
                      "checking the fixed model for TensorRT 8.5"], proc.stderr
    assert lines[len(phases):] == [f"wrote {tmp_path / 'fixed.onnx'}"], proc.stderr  # nothing else: no status line
    assert "\r" not in proc.stderr


def test_quiet_prints_no_phase(tmp_path):
    proc = _cli(tmp_path, "--quiet")
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == "", proc.stderr


def test_status_line_on_a_terminal_goes_through_verification(tmp_path):
    """stderr on a pseudo-terminal: tqdm's line names the verification phases and the time."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # tqdm draws nothing 0 columns wide
    proc = subprocess.Popen(_cmd(tmp_path), stdout=subprocess.DEVNULL, stderr=follower, env=ENV)
    os.close(follower)
    seen = b""
    try:
        while True:  # read as it comes (a full pty buffer would block the run)
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the run is over and everything was read
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    text = seen.decode(errors="replace")
    assert proc.wait(timeout=300) == 0, text
    assert "graphfix: comparing 10 regions: 0 done [00:0" in text and "graphfix: end-to-end run of the fixed model [00:0" in text, text
    assert not PHASE.search(text.replace("\r", "\n")), "a terminal gets the live line, not the log lines"
