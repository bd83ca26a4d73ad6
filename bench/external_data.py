"""A model over 2 GiB with external data: fixed, written with external data, peak memory vs weights.

Builds ``--weights`` MatMul weights of ``--dim``² fp32 (default 4 x 604 MB = 2.4 GB) with the
computed-bound Clips fold-clip rewrites, saved with external data; runs graphfix on it with and
without verification in child processes (each reports its own peak RSS) and checks that the
written model runs in onnxruntime.

    python bench/external_data.py [--weights 4 --dim 12288]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PEAK = "import resource, sys; print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"


def child(code: str) -> tuple[float, float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", f"{code}\n{_PEAK}"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return time.perf_counter() - start, float(proc.stderr.split("PEAK")[-1].split()[0]) / 1024, proc.stdout


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", type=int, default=4)
    ap.add_argument("--dim", type=int, default=12288)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=ROOT) as d:
        src = Path(d, "big.onnx")
        child("import onnx; from tests.helpers.models import weight_chain; "
              f"onnx.save(weight_chain({args.weights}, {args.dim}, value=1e-5), {str(src)!r}, save_as_external_data=True, location='big.data')")
        weights_mb = Path(d, "big.data").stat().st_size / 2**20
        print(f"weights: {weights_mb:.0f} MB in big.data (model file {src.stat().st_size / 1024:.0f} KB)\n")
        print("| run | seconds | peak MB | peak / weights |")
        print("|---|---:|---:|---:|")
        for label, extra in (("graphfix --no-verify", ["--no-verify"]), ("graphfix (verified, 2 sessions)", [])):
            out = Path(d, "fixed.onnx")
            t, peak, _ = child(f"from graphfix.cli.main import main; main([{str(src)!r}, {str(out)!r}, '--passes', 'fold-clip', '--quiet', *{extra!r}])")
            print(f"| {label} | {t:.1f} | {peak:.0f} | {peak / weights_mb:.2f}x |", flush=True)
        t, peak, _ = child(f"import onnxruntime as ort; ort.InferenceSession({str(out)!r}, providers=['CPUExecutionProvider'])")
        print(f"| onnxruntime loads the written model | {t:.1f} | {peak:.0f} | {peak / weights_mb:.2f}x |")
        print(f"\nwritten: {out.name} {out.stat().st_size / 1024:.0f} KB + {Path(d, 'fixed.onnx.data').stat().st_size / 2**20:.0f} MB data")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
