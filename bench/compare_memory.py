"""Memory of comparing big outputs (issue 33): the peak resident size of graphfix's own process
and of its onnxruntime worker while ``graphfix big.onnx out.onnx`` verifies a model whose one float
output is ``--mb`` MB (``x`` [1, 1024] expanded to rows x 1024, beside a Clip whose bound is
Constant->Cast that fold-clip folds: tests/helpers/models.py ``big_output``), as a ratio to the
output's size and above the same run with a 4 KB output (the interpreter, its imports, the worker's
machinery). A ratio, not a time: the machine's load does not move it.

    python bench/compare_memory.py              # 200 MB and 400 MB outputs
    python bench/compare_memory.py --mb 200

Each run is ``python -m graphfix`` under a child subreaper: graphfix's own peak is what ``wait4``
says of it (what ``/usr/bin/time -v`` prints), the worker's what its own ``wait4`` says once it is
orphaned and reaped.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's graphfix, not an installed one

from tests.helpers.models import big_output  # noqa: E402

#: Run under a child subreaper: graphfix's wait4 first (its own peak), then the orphaned worker's.
_REPORTER = """
import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, own = os.wait4(proc.pid, 0)
worker = 0
while True:
    try:
        _, _, usage = os.wait4(-1, 0)
    except ChildProcessError:
        break
    worker = max(worker, usage.ru_maxrss)
print(own.ru_maxrss, worker, os.waitstatus_to_exitcode(status))
"""


def peaks(rows: int, folder: Path, extra: list[str]) -> tuple[int, int]:
    """(graphfix's peak, the worker's peak) in bytes, fixing a model whose output is rows x 1024 float32."""
    path = folder / f"big{rows}.onnx"
    onnx.save(big_output(rows), str(path))
    cmd = [sys.executable, "-c", _REPORTER, sys.executable, "-m", "graphfix", str(path), str(folder / "out.onnx"), *extra]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    own, worker, rc = (int(v) for v in done.stdout.split())
    if rc != 0:
        raise SystemExit(f"graphfix exited {rc} on {rows} rows")
    return own * 1024, worker * 1024


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, nargs="+", default=[200, 400], help="output sizes in MB (10^6 bytes)")
    ap.add_argument("extra", nargs="*", help="more graphfix options (after --)")
    args = ap.parse_args(argv)
    mb = 1e6
    with tempfile.TemporaryDirectory() as tmp:
        base_own, base_worker = peaks(1, Path(tmp), args.extra)
        print(f"baseline (4 KB output): graphfix {base_own / mb:.0f} MB, worker {base_worker / mb:.0f} MB", flush=True)
        for size in args.mb:
            rows = int(size * mb) // 4096
            output = rows * 4096
            own, worker = peaks(rows, Path(tmp), args.extra)
            print(f"{output / mb:.0f} MB output: graphfix {own / mb:.0f} MB ({own / output:.2f}x the output; "
                  f"{(own - base_own) / mb:.0f} MB above the baseline, {(own - base_own) / output:.2f}x), "
                  f"worker {worker / mb:.0f} MB ({worker / output:.2f}x; {(worker - base_worker) / output:.2f}x above its baseline)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
