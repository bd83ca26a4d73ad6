"""Models more than one place builds: the weight chain (tests/onnxio/test_external_data.py, and
bench/external_data.py, bench/worker_overhead.py in a child process); the many-outputs model
(tests/verify/test_verification_cost.py, bench/many_outputs.py); the big-output model
(tests/verify/test_comparison_memory.py, bench/compare_memory.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def weight_chain(blocks: int, dim: int, value: float | None = None) -> onnx.ModelProto:
    """MatMul -> Clip with Constant->Cast bounds (fold-clip rewrites it), ``blocks`` weights."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(blocks):
        w = np.full((dim, dim), value, np.float32) if value is not None else (rng.standard_normal((dim, dim)) / dim).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"m{k}"]),
                  helper.make_node("Constant", [], [f"lo{k}"], value=numpy_helper.from_array(np.array(-1.0, np.float64))),
                  helper.make_node("Cast", [f"lo{k}"], [f"lof{k}"], to=TensorProto.FLOAT),
                  helper.make_node("Clip", [f"m{k}", f"lof{k}"], [f"y{k}"], name=f"/b{k}/Clip")]
        x = f"y{k}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, dim])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, dim])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def many_outputs(n: int) -> onnx.ModelProto:
    """``x`` [2, 8] -> ``n`` outputs y0..y{n-1} (Identity, Relu, ...) beside a Clip whose bound is
    Constant->Cast (fold-clip rewrites it, so verification runs and compares every output)."""
    nodes = [
        helper.make_node("Constant", [], ["lo"], name="/lo", value=numpy_helper.from_array(np.array(-0.5, np.float64))),
        helper.make_node("Cast", ["lo"], ["lof"], name="/Cast", to=TensorProto.FLOAT),
        helper.make_node("Clip", ["x", "lof"], ["clipped"], name="/Clip"),
    ]
    outputs = [helper.make_tensor_value_info("clipped", TensorProto.FLOAT, [2, 8])]
    for k in range(n):
        nodes.append(helper.make_node("Relu" if k % 2 else "Identity", ["x"], [f"y{k}"], name=f"/out{k}"))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [2, 8]))
    graph = helper.make_graph(nodes, "many_outputs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def big_output(rows: int, clipped: bool = False) -> onnx.ModelProto:
    """``x`` [1, 1024] expanded to ``y`` [rows, 1024] float32 (rows x 4 KB), beside a Clip of ``x``
    whose bound is Constant->Cast (fold-clip rewrites it, so verification runs and compares ``y``);
    ``clipped``: the Clip reads ``y`` and is the big output (the probe then holds its rewritten copy too)."""
    clip_in, big = ("y", "y_clipped") if clipped else ("x", "y")
    nodes = [
        helper.make_node("Expand", ["x", "rows"], ["y"], name="/Expand"),
        helper.make_node("Constant", [], ["lo"], name="/lo", value=numpy_helper.from_array(np.array(-0.5, np.float64))),
        helper.make_node("Cast", ["lo"], ["lof"], name="/Cast", to=TensorProto.FLOAT),
        helper.make_node("Clip", [clip_in, "lof"], ["small" if not clipped else big], name="/Clip"),
    ]
    outputs = [helper.make_tensor_value_info(big, TensorProto.FLOAT, [rows, 1024])]
    if not clipped:
        outputs.append(helper.make_tensor_value_info("small", TensorProto.FLOAT, [1, 1024]))
    graph = helper.make_graph(nodes, "big_output", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])], outputs,
                              [numpy_helper.from_array(np.array([rows, 1024], np.int64), "rows")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
