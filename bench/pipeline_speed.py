"""How fast graphfix is, as ratios: against onnx.load+onnx.save and against onnxsim, same file.

Builds synthetic exports of growing size (blocks of Conv -> computed-bound Clip -> Add, the
pattern fold-clip rewrites) and reports, per size:
  - graphfix --passes all --no-verify  /  (onnx.load + onnx.save)
  - graphfix --passes all (verified)   /  (onnx.load + onnx.save)
  - graphfix --no-verify               /  onnxsim.simplify
  - seconds per 1000 nodes for the pass pipeline alone (flat when passes are linear)

    python bench/pipeline_speed.py [--blocks 250 500 1000 2000]

Ratios, not absolute times, are the goal: see README "Performance".
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def synthetic(blocks: int, channels: int = 8) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for b in range(blocks):
        w = f"w{b}"
        inits.append(numpy_helper.from_array((rng.standard_normal((channels, channels, 1, 1)) * 0.3).astype(np.float32), w))
        nodes += [
            helper.make_node("Conv", [x, w], [f"c{b}"], name=f"/b{b}/Conv"),
            helper.make_node("Constant", [], [f"lo64_{b}"], value=numpy_helper.from_array(np.array(-1.0), f"lo64_{b}")),
            helper.make_node("Cast", [f"lo64_{b}"], [f"lo{b}"], to=TensorProto.FLOAT, name=f"/b{b}/Cast"),
            helper.make_node("Clip", [f"c{b}", f"lo{b}"], [f"k{b}"], name=f"/b{b}/Clip"),
            helper.make_node("Add", [f"k{b}", x], [f"y{b}"], name=f"/b{b}/Add"),
        ]
        x = f"y{b}"
    graph = helper.make_graph(
        nodes, "bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 8, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, channels, 8, 8])], inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def measure(src: str, dst: str, repeat: int) -> tuple[float, float, float, float]:
    """Seconds for load+save, graphfix unverified, graphfix verified, onnxsim (+save)."""
    import onnxsim

    import graphfix

    base = best_of(lambda: onnx.save(onnx.load(src), dst), repeat)
    unverified = best_of(lambda: graphfix.fix(src, "all", verify=False, output=dst), repeat)
    verified = best_of(lambda: graphfix.fix(src, "all", output=dst), 1)
    sim = best_of(lambda: onnx.save(onnxsim.simplify(onnx.load(src))[0], dst), 1)
    return base, unverified, verified, sim


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, nargs="+", default=[250, 500, 1000, 2000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print("| nodes | load+save s | graphfix no-verify s | ratio | graphfix verified s | ratio | onnxsim s | graphfix/onnxsim | s per 1k nodes |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for blocks in args.blocks:
            src, dst = Path(tmp, f"m{blocks}.onnx"), Path(tmp, f"o{blocks}.onnx")
            m = synthetic(blocks)
            onnx.save(m, src)
            n = len(m.graph.node)
            base, nv, ver, sim = measure(str(src), str(dst), args.repeat)
            print(f"| {n} | {base:.3f} | {nv:.3f} | {nv / base:.1f}x | {ver:.3f} | {ver / base:.1f}x | {sim:.3f} | {nv / sim:.2f}x | {nv / n * 1000:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
