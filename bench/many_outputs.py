"""Verification's cost in the number of outputs: a model with N small outputs (alternately Identity
and Relu of one input) beside one rewrite (a Clip whose bound is Constant->Cast, which fold-clip
folds; tests/helpers/models.py), fixed with verification on, for each N in one run; the last line is the ratio of the
largest N's time to the smallest's (linear: 4 for 8000/2000).

    python bench/many_outputs.py                 # 2000 and 8000 outputs
    python bench/many_outputs.py --outputs 500 2000 --profile prof.out   # cProfile of the last N
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import tempfile
import time
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's graphfix, not an installed one

import graphfix  # noqa: E402
from tests.helpers.models import many_outputs  # noqa: E402


def timed(n: int, folder: Path, profile: str | None = None) -> float:
    path = folder / f"outputs{n}.onnx"
    onnx.save(many_outputs(n), str(path))
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    result = graphfix.fix(path, passes="fold-clip")
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    took = time.perf_counter() - start
    kept = [p.name for p in result.report.passes if p.rewritten]
    if kept != ["fold-clip"]:
        raise SystemExit(f"{n} outputs: expected fold-clip to rewrite and be kept, got {result.report.passes}")
    return took


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--outputs", type=int, nargs="+", default=[2000, 8000])
    ap.add_argument("--profile", help="write a cProfile of the last run here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        timed(50, Path(tmp))  # the worker started and onnxruntime imported before anything is timed
        times = []
        for k, n in enumerate(args.outputs):
            last = k == len(args.outputs) - 1
            times.append(timed(n, Path(tmp), args.profile if last else None))
            print(f"{n} outputs: {times[-1]:.2f} s", flush=True)
    if len(times) > 1:
        print(f"ratio {args.outputs[-1]}/{args.outputs[0]} outputs: {times[-1] / times[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
