"""onnxruntime CPU latency of native Gelu vs what gelu-decompose writes, as ratios.

    python bench/gelu_latency.py [--shape 8 512 768] [--rounds 5]

For each ``approximate`` mode: the native Gelu (opset 20) and the decomposed graph, single-threaded
onnxruntime, fp32, best of repeated runs, in three settings:

* ``feeds a layer``: Gelu's output goes on into the graph, as in every MLP (modelled by a Slice
  reading one row, so the consumer costs nothing); default graph optimizations. onnxruntime fuses
  the Erf formula back into Gelu and the tanh formula into its FastGelu kernel.
* ``graph output``: Gelu's output is the graph output; onnxruntime's FastGelu fusion does not fire
  there (it never fuses a node whose output is a graph output), the Erf fusion does.
* ``no optimizations``: ORT_DISABLE_ALL, the cost of the elementwise chain itself, node by node.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphfix import passes  # noqa: E402

ALL, NONE = ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL
#: setting -> (Gelu feeds a one-row Slice, optimization level)
SETTINGS = {"feeds a layer": (True, ALL), "graph output": (False, ALL), "no optimizations": (False, NONE)}


def native(shape: list[int], mode: str, consumer: bool) -> onnx.ModelProto:
    nodes = [helper.make_node("Gelu", ["x"], ["g" if consumer else "y"], approximate=mode)]
    inits = []
    out_shape = list(shape)
    if consumer:
        nodes.append(helper.make_node("Slice", ["g", "starts", "ends", "axes"], ["y"]))
        inits = [numpy_helper.from_array(np.array([v], np.int64), k) for k, v in (("starts", 0), ("ends", 1), ("axes", 0))]
        out_shape[0] = 1
    graph = helper.make_graph(
        nodes, "gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _session(model: onnx.ModelProto, level: ort.GraphOptimizationLevel) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = level
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def as_run(model: onnx.ModelProto, level: ort.GraphOptimizationLevel) -> str:
    """What onnxruntime actually runs for ``model`` after its graph optimizations."""
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        opts.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        opts.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        ops = [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node if n.op_type != "Slice"]
    return ops[0] if len(ops) == 1 else f"{len(ops)} nodes"


def latencies_ms(models: list[onnx.ModelProto], x: np.ndarray, level: ort.GraphOptimizationLevel, rounds: int) -> list[float]:
    """Best per-run time of each model; rounds alternate between the models (fair on a busy machine)."""
    sessions = [_session(m, level) for m in models]
    best = [float("inf")] * len(sessions)
    for _ in range(rounds):
        for i, sess in enumerate(sessions):
            sess.run(None, {"x": x})
            start, k = time.perf_counter(), 0
            while k < 3 or time.perf_counter() - start < 0.3:
                sess.run(None, {"x": x})
                k += 1
            best[i] = min(best[i], (time.perf_counter() - start) / k)
    return [t * 1e3 for t in best]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", type=int, nargs="+", default=[8, 512, 768])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args(argv)
    x = np.random.default_rng(0).standard_normal(args.shape).astype(np.float32)
    print(f"Gelu on {tuple(args.shape)} fp32, onnxruntime {ort.__version__} CPU, 1 thread, best of {args.rounds}")
    print()
    print("| approximate | setting | native ms | decomposed ms | decomposed / native | decomposed, as onnxruntime runs it |")
    print("|---|---|---:|---:|---:|---|")
    for mode in ("none", "tanh"):
        for label, (consumer, level) in SETTINGS.items():
            m = native(args.shape, mode, consumer)
            fixed = passes.get("gelu-decompose").apply(m).model
            t_native, t_fixed = latencies_ms([m, fixed], x, level, args.rounds)
            print(f"| {mode} | {label} | {t_native:.2f} | {t_fixed:.2f} | {t_fixed / t_native:.2f}x | {as_run(fixed, level)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
