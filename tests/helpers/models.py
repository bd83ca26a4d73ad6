"""Models more than one place builds: the weight chain (tests/onnxio/test_external_data.py, and
bench/external_data.py, bench/worker_overhead.py in a child process)."""

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
