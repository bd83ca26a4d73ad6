"""Issue 8, item 1: which in-memory graph to import into, measured on the bench/scale.py models.

Per model, in a fresh process each (best of two; gc off during the import, as the pipeline runs):
``onnx.load`` alone, ``onnx_graphsurgeon.import_onnx``, graphfix's linear importer
(graphfix.graph.importer, given the types shape inference found), onnx_ir's ``serde.deserialize_model``
when onnx_ir is installed (``pip install onnx-ir``; not a graphfix dependency), and the shape
inference on the weightless copy that every choice needs for types.

    python bench/importers.py --blocks 2500 25000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
from scale import chain

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import gc, json, resource, sys, time
import onnx
variant, path = sys.argv[1], sys.argv[2]
model = onnx.load(path)
if variant == "graphfix":
    from graphfix.graph.convert import infer
    from graphfix.graph.importer import import_typed
elif variant == "onnx-graphsurgeon":
    import onnx_graphsurgeon as gs
elif variant == "onnx_ir":
    import onnx_ir as ir
gc.disable()
if variant == "graphfix":
    inferred = infer(model)  # any importer needs the types: timed apart (the shape-inference row)
start = time.perf_counter()
if variant == "graphfix":
    graph = import_typed(model, inferred)
elif variant == "shape-inference":
    from graphfix.graph.convert import infer
    infer(model)
elif variant == "onnx-graphsurgeon":
    graph = gs.import_onnx(model)
elif variant == "onnx_ir":
    graph = ir.serde.deserialize_model(model)
seconds = time.perf_counter() - start
print(json.dumps({"s": seconds, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(variant: str, path: Path) -> tuple[float, float] | None:
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _CHILD, variant, str(path)], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            if "No module named" in proc.stderr:
                return None  # onnx_ir not installed
            raise SystemExit(proc.stderr[-2000:])
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return min(r["s"] for r in runs), max(r["peak"] for r in runs)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, nargs="+", default=[2500, 25000])
    ap.add_argument("--dim", type=int, default=64)
    args = ap.parse_args(argv)
    print("| nodes | importer | import s (graph from a loaded ModelProto) | peak MB |")
    print("|---:|---|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for blocks in args.blocks:
            src = Path(d, "in.onnx")
            onnx.save(chain(blocks, args.dim), str(src))  # each measurement runs in its own process
            for variant in ("shape-inference", "onnx-graphsurgeon", "onnx_ir", "graphfix"):
                got = measure(variant, src)
                if got is not None:
                    print(f"| {4 * blocks} | {variant} | {got[0]:.2f} | {got[1]:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
