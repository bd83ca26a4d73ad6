"""onnxruntime CPU latency of the SuperGlue attention block: Einsum graph vs einsum-to-matmul's.

    python bench/einsum_latency.py [--heads 4] [--dim 64] [--points 1024]

The block is the fixture ``fixtures/einsum_to_matmul/superglue_attention`` at SuperGlue's real
sizes (4 heads x 64 dims, N = M keypoints). Reported: best-of latency and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphfix import passes  # noqa: E402


def attention(heads: int, dim: int) -> onnx.ModelProto:
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Einsum", ["q", "k"], ["s0"], equation="bdhn,bdhm->bhnm"),
        helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("Einsum", ["p", "v"], ["msg"], equation="bhnm,bdhm->bdhn"),
        helper.make_node("Reshape", ["msg", "shape"], ["d0"]),
        helper.make_node("Einsum", ["d0", "d1"], ["scores"], equation="bdn,bdm->bnm"),
    ]
    inputs = [helper.make_tensor_value_info(n, f, [1, dim, heads, "N" if n == "q" else "M"]) for n in ("q", "k", "v")]
    inputs.append(helper.make_tensor_value_info("d1", f, [1, dim * heads, "M"]))
    inits = [numpy_helper.from_array(np.array(dim**-0.5, np.float32), "scale"),
             numpy_helper.from_array(np.array([1, dim * heads, -1], np.int64), "shape")]
    graph = helper.make_graph(nodes, "attn", inputs, [helper.make_tensor_value_info("scores", f, [1, "N", "M"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def latency_ms(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int) -> float:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        sess.run(None, feeds)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--points", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    m = attention(args.heads, args.dim)
    fixed = passes.get("einsum-to-matmul").apply(m).model
    print("| keypoints | Einsum graph ms | rewritten ms | rewritten / Einsum |")
    print("|---:|---:|---:|---:|")
    for n in args.points:
        rng = np.random.default_rng(0)
        feeds = {k: rng.standard_normal((1, args.dim, args.heads, n)).astype(np.float32) for k in ("q", "k", "v")}
        feeds["d1"] = rng.standard_normal((1, args.dim * args.heads, n)).astype(np.float32)
        a, b = latency_ms(m, feeds, args.threads), latency_ms(fixed, feeds, args.threads)
        print(f"| {n} | {a:.2f} | {b:.2f} | {b / a:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
