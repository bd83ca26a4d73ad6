"""What running onnxruntime in graphfix's worker process costs: the verified run's wall time, CPU
time (graphfix and its worker together) and peak RSS (the larger process) against a checkout
from before the worker, and the ``--no-verify`` run, which starts no worker.

Models: bench/scale.py's MatMul -> Clip chain (``--blocks 25000``: 100k nodes, 410 MB of inline
weights, which cross to the worker through shared memory once per session) and an external-data
chain (``--ext-weights`` x ``--ext-dim``² fp32; onnxruntime reads those from the model's folder, as
before). Each command runs ``--repeat`` times, best time kept.

    git worktree add /tmp/before <commit before the worker>
    python bench/worker_overhead.py --before /tmp/before [--blocks 25000] [--ext-weights 4 --ext-dim 12288]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The command under its own parent, a child subreaper: graphfix's worker, orphaned when graphfix
#: exits, is reaped there too, so RUSAGE_CHILDREN holds both processes' CPU time and the larger
#: of their peak RSS. CPU seconds are what a loaded machine distorts least.
_REPORTER = """
import ctypes, os, resource, subprocess, sys
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
rc = subprocess.run(sys.argv[1:]).returncode
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print('PEAK', u.ru_maxrss, 'RC', rc, 'CPU', u.ru_utime + u.ru_stime, file=sys.stderr)
"""


def measure(tree: Path, args: list[str], repeat: int) -> tuple[float, float, float]:
    """(best wall seconds, best CPU seconds, peak RSS MB) of ``graphfix ARGS`` from ``tree``."""
    best, cpu, peak = float("inf"), float("inf"), 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", _REPORTER, sys.executable, "-m", "graphfix", *args, "--quiet"],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
        best = min(best, time.perf_counter() - start)
        tail = proc.stderr.split("PEAK")[-1].split()
        if tail[2] not in ("0", "4"):
            raise SystemExit(f"{tree}: graphfix {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
        peak, cpu = max(peak, float(tail[0]) / 1024), min(cpu, float(tail[4]))
    return best, cpu, peak


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True, help="a checkout of graphfix from before the worker")
    ap.add_argument("--blocks", type=int, default=25000)
    ap.add_argument("--ext-weights", type=int, default=4)
    ap.add_argument("--ext-dim", type=int, default=12288)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--models", default="chain,ext", help="which models: chain, ext or both")
    args = ap.parse_args(argv)
    print("| model | run | before wall s | worker wall s | before CPU s | worker CPU s | CPU ratio | before peak MB | worker peak MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        chain, ext = Path(d, "chain.onnx"), Path(d, "ext.onnx")
        models = []
        if "chain" in args.models:
            subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = ['bench']; import onnx, scale; "
                            f"onnx.save(scale.chain({args.blocks}, 64), {str(chain)!r})"], cwd=ROOT, check=True)
            models.append((f"chain, {4 * args.blocks} nodes, {chain.stat().st_size / 2**20:.0f} MB inline", chain))
        if "ext" in args.models:
            subprocess.run([sys.executable, "-c", "import onnx; from tests.helpers.models "
                            f"import weight_chain; onnx.save(weight_chain({args.ext_weights}, {args.ext_dim}, value=1e-5), {str(ext)!r}, "
                            "save_as_external_data=True, location='ext.data')"], cwd=ROOT, check=True)
            models.append((f"external data, {args.ext_weights * args.ext_dim**2 * 4 / 2**30:.2f} GB", ext))
        for label, src in models:
            for run, extra in (("verified", []), ("--no-verify", ["--no-verify"])):
                t0, c0, p0 = measure(args.before, [str(src), str(Path(d, "out.onnx")), *extra], args.repeat)
                t1, c1, p1 = measure(ROOT, [str(src), str(Path(d, "out.onnx")), *extra], args.repeat)
                print(f"| {label} | {run} | {t0:.2f} | {t1:.2f} | {c0:.2f} | {c1:.2f} | {c1 / c0:.3f} | {p0:.0f} | {p1:.0f} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
