"""onnxruntime CPU latency of LayerNormalization / GroupNormalization vs what the decompose passes write.

    python bench/norm_latency.py [--repeat 5]

LayerNormalization on (8, 512, 768) fp32 (opset 17, and opset 18 where the pass writes ReduceSum
/ count for parsers before 10.0), GroupNormalization on (8, 320, 64, 64) with 32 groups (opset
21). Single-threaded, best of repeated runs. Two columns per row: onnxruntime's default
optimisations (its LayerNormFusion turns the opset-17 pattern back into its kernel) and
optimisations off (the decomposition's own cost). Alternatives measured with it: Mul(d, d)
instead of Pow(d, 2), and GroupNorm through InstanceNormalization (torch.onnx's form).
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

LN_SHAPE, GN_SHAPE, GROUPS = (8, 512, 768), (8, 320, 64, 64), 32


def _model(node: onnx.NodeProto, shape: tuple[int, ...], inits: list[onnx.TensorProto], opset: int) -> onnx.ModelProto:
    graph = helper.make_graph([node], "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", *shape[1:]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", *shape[1:]])], inits)
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def layernorm(opset: int) -> onnx.ModelProto:
    r = np.random.default_rng(0)
    d = LN_SHAPE[-1]
    inits = [numpy_helper.from_array((1 + 0.1 * r.standard_normal(d)).astype(np.float32), "s"),
             numpy_helper.from_array((0.1 * r.standard_normal(d)).astype(np.float32), "b")]
    return _model(helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5), LN_SHAPE, inits, opset)


def groupnorm() -> onnx.ModelProto:
    r = np.random.default_rng(1)
    c = GN_SHAPE[1]
    inits = [numpy_helper.from_array((1 + 0.1 * r.standard_normal(c)).astype(np.float32), "s"),
             numpy_helper.from_array((0.1 * r.standard_normal(c)).astype(np.float32), "b")]
    return _model(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=GROUPS, epsilon=1e-5), GN_SHAPE, inits, 21)


def square_by_mul(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph with Pow(d, 2) written as Mul(d, d) (what the pass writes with ReduceSum)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        if n.op_type == "Pow":
            n.op_type = "Mul"
            n.input[1] = n.input[0]
    return m


def instance_norm_groupnorm(model: onnx.ModelProto) -> onnx.ModelProto:
    """Reshape [N, G, -1] -> InstanceNormalization(ones, zeros) -> Reshape -> Mul -> Add (torch.onnx's form)."""
    c = GN_SHAPE[1]
    s, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    inits = [numpy_helper.from_array(np.array([0, GROUPS, -1], np.int64), "gshape"),
             numpy_helper.from_array(np.ones(GROUPS, np.float32), "ones"), numpy_helper.from_array(np.zeros(GROUPS, np.float32), "zeros"),
             numpy_helper.from_array(s.reshape(c, 1, 1), "s3"), numpy_helper.from_array(b.reshape(c, 1, 1), "b3")]
    nodes = [helper.make_node("Reshape", ["x", "gshape"], ["xg"]), helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("InstanceNormalization", ["xg", "ones", "zeros"], ["ng"], epsilon=1e-5),
             helper.make_node("Reshape", ["ng", "xs"], ["n"]), helper.make_node("Mul", ["n", "s3"], ["sc"]),
             helper.make_node("Add", ["sc", "b3"], ["y"])]
    graph = helper.make_graph(nodes, "in", list(model.graph.input), list(model.graph.output), inits)
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def _session(model: onnx.ModelProto, optimise: bool) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    if not optimise:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def latencies_ms(models: list[onnx.ModelProto], x: np.ndarray, optimise: bool, repeat: int) -> list[float]:
    """Best per-run time of each model over ``repeat`` rounds of >= 0.2 s windows, the models
    taking turns within a round so that load from other processes hits them alike."""
    sessions = [_session(m, optimise) for m in models]
    best = [float("inf")] * len(models)
    for s in sessions:
        s.run(None, {"x": x})
    for _ in range(repeat):
        for i, s in enumerate(sessions):
            start, k = time.perf_counter(), 0
            while time.perf_counter() - start < 0.2:
                s.run(None, {"x": x})
                k += 1
            best[i] = min(best[i], (time.perf_counter() - start) / k)
    return [b * 1e3 for b in best]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    ln_x = (rng.standard_normal(LN_SHAPE) + 1).astype(np.float32)
    gn_x = (rng.standard_normal(GN_SHAPE) + 1).astype(np.float32)
    ln17, ln18, gn = layernorm(17), layernorm(18), groupnorm()
    ln_pass, gn_pass = passes.get("layernorm-decompose"), passes.get("groupnorm-decompose")
    rows = [
        ("LayerNorm opset 17: ReduceMean, Pow (pass)", ln17, ln_pass.apply(ln17).model, ln_x),
        ("LayerNorm opset 17: ReduceMean, Mul(d, d) (not used)", ln17, square_by_mul(ln_pass.apply(ln17).model), ln_x),
        ("LayerNorm opset 18: ReduceSum / count, Mul (pass, --trt < 10.0)", ln18, ln_pass.apply(ln18).model, ln_x),
        ("GroupNorm opset 21: ReduceSum / count, Mul (pass, --trt < 10.0)", gn, gn_pass.apply(gn).model, gn_x),
        ("GroupNorm opset 21: ReduceMean, Pow (pass, --trt 10.0-10.8)", gn, gn_pass.apply(gn, trt="10.1").model, gn_x),
        ("GroupNorm opset 21: InstanceNormalization (not used)", gn, instance_norm_groupnorm(gn), gn_x),
    ]
    print("| graph | native ms | decomposed ms | ratio | native ms, no opt. | decomposed ms, no opt. | ratio, no opt. |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, native, decomposed, x in rows:
        t = [ms for opt in (True, False) for ms in latencies_ms([native, decomposed], x, opt, args.repeat)]
        print(f"| {label} | {t[0]:.2f} | {t[1]:.2f} | {t[1] / t[0]:.2f}x | {t[2]:.2f} | {t[3]:.2f} | {t[3] / t[2]:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
