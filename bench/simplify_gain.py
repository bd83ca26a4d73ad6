"""What --simplify (onnxsim) adds to graphfix's own rewriting on the real-export fixtures:
node counts of `graphfix F --passes auto --trt V` with and without it, and the step's verdict.

    python bench/simplify_gain.py [--trt 8.5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import graphfix  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trt", default="8.5")
    args = parser.parse_args()
    print(f"| fixture (--passes auto --trt {args.trt}) | input nodes | graphfix | graphfix --simplify | simplify step |")
    print("|---|---:|---:|---:|---|")
    for path in sorted((ROOT / "fixtures" / "real").glob("*.onnx")):
        with contextlib.redirect_stdout(io.StringIO()):
            plain = graphfix.fix(str(path), "auto", trt=args.trt)
            simple = graphfix.fix(str(path), "auto", trt=args.trt, simplify=True)
        step = simple.report.passes[0]
        why = step.verdict + (f" ({step.reason.split(':', 2)[-1].strip()[:60]})" if step.reason else "")
        nodes_in = step.nodes_before
        print(f"| {path.stem} | {nodes_in} | {len(plain.model.graph.node)} | {len(simple.model.graph.node)} | {why} |")


if __name__ == "__main__":
    main()
