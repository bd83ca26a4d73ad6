"""onnxruntime CPU latency of CumSum vs what cumsum-decompose writes, as ratios.

    python bench/cumsum_latency.py [--rows 64] [--lengths 16 256 4096 16384]

For each length: the native CumSum, the strategy the pass chooses (triangular MatMul for n <= 64,
64-blocked MatMul above), and the log-step scan (what integers and dynamic lengths get).
Single-threaded onnxruntime, fp32, best of repeated runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _latency import latency_us  # noqa: E402

from graphfix import passes  # noqa: E402
from graphfix.graph import Builder, replace_tensor, to_graph, to_model  # noqa: E402
from graphfix.passes._scan import log_scan  # noqa: E402


def native(rows: int, n: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("CumSum", ["x", "axis"], ["y"])], "cumsum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])],
        [numpy_helper.from_array(np.array(1, np.int64), "axis")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def scan(model: onnx.ModelProto, n: int) -> onnx.ModelProto:
    graph = to_graph(model)
    node = graph.nodes[0]
    y = log_scan(Builder(graph, "scan"), node.inputs[0], 2, n, False, False)
    replace_tensor(graph, node.outputs[0], y)
    return to_model(graph, model)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 256, 4096, 16384])
    args = parser.parse_args(argv)
    print("| n | native µs | chosen µs | chosen / native | largest constant | log-step scan µs | scan / native |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.lengths:
        x = np.random.default_rng(0).standard_normal((args.rows, n)).astype(np.float32)
        m = native(args.rows, n)
        chosen = passes.get("cumsum-decompose").apply(m).model
        biggest = max((int(np.prod(t.dims)) for t in chosen.graph.initializer), default=0)
        t_native, t_chosen, t_scan = latency_us(m, {"x": x}), latency_us(chosen, {"x": x}), latency_us(scan(m, n), {"x": x})
        print(f"| {n} | {t_native:.0f} | {t_chosen:.0f} | {t_chosen / t_native:.2f}x | {biggest} | {t_scan:.0f} | {t_scan / t_native:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
