"""onnxruntime CPU latency of GridSample vs what gridsample-decompose writes, as ratios.

    python bench/gridsample_latency.py [--repeats 15]

Rows: SuperPoint descriptor sampling (1x256x60x80 descriptors, 1024 keypoints, bilinear,
align_corners=True) and a few other shapes/modes. Columns: the native op, the pass's layout
(one Transpose to rows [N*L, C], one Gather of rows, Mul + ReduceSum over the taps) and two
layouts it rejected: gathering single elements from channel planes [C, N*L] (no Transpose when
N = 1), and the row layout with the taps summed by a batched MatMul. Single-threaded onnxruntime, fp32; sessions are timed in
interleaved rounds and the best round counts (the machine is shared).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphfix import passes  # noqa: E402
from graphfix.graph import Builder, replace_tensor, tensor_dtype, to_graph, to_model  # noqa: E402
from graphfix.passes import gridsample_decompose as gsd  # noqa: E402

CASES = [  # name, x shape, grid shape, mode, padding, align_corners, opset
    ("SuperPoint 1x256x60x80, 1024 kpts, bilinear", (1, 256, 60, 80), (1, 1, 1024, 2), "bilinear", "zeros", 1, 16),
    ("flow warp 2x3x96x128, bilinear", (2, 3, 96, 128), (2, 96, 128, 2), "bilinear", "zeros", 0, 16),
    ("1x64x32x32, 32x32 grid, nearest reflection", (1, 64, 32, 32), (1, 32, 32, 2), "nearest", "reflection", 0, 16),
    ("1x32x24x24, 24x24 grid, bicubic border", (1, 32, 24, 24), (1, 24, 24, 2), "bicubic", "border", 1, 16),
    ("5-D 1x16x16x16x16, 8^3 grid, linear", (1, 16, 16, 16, 16), (1, 8, 8, 8, 3), "linear", "zeros", 0, 20),
]


class _ElementGather(gsd._Sampler):
    """Rejected: gather single elements from channel planes [C, N*L] (no Transpose for N = 1)."""

    def _gather(self, index: gs.Tensor, weights: gs.Tensor | None) -> gs.Tensor:
        b, taps, d = self.b, len(gsd.TAPS[self.mode]) ** self.dims, self.dims
        n, c = self.x.shape[:2]
        planes = b.reshape(self.x, np.array([c, -1], np.int64)) if n == 1 else \
            b.reshape(b.transpose(b.reshape(self.x, np.array([n, c, -1], np.int64)), [1, 0, 2]), np.array([c, -1], np.int64))
        picked = b.reshape(b.op("Gather", [planes, b.reshape(index, np.array([-1], np.int64))], {"axis": 1}),
                           np.array([c, taps, -1], np.int64))  # [C, T^D, N*P]
        if weights is not None:
            picked = b.op("Mul", [picked, weights])
        picked = b.reduce("ReduceSum", picked, [1], keepdims=False)
        picked = b.reshape(picked, np.array([c, n, *self.grid.shape[1:-1]], np.int64))
        return b.transpose(picked, [1, 0, *range(2, d + 2)])


class _RowsMatMul(gsd._Sampler):
    """Rejected: the pass's row layout, taps summed by [N*P, 1, T^D] @ [N*P, T^D, C] MatMul."""

    def _gather(self, index: gs.Tensor, weights: gs.Tensor | None) -> gs.Tensor:
        b, d = self.b, self.dims
        rows = b.transpose(b.reshape(self.x, np.array([0, 0, -1], np.int64)), [0, 2, 1])
        rows = b.reshape(rows, np.array([-1, self.x.shape[1]], np.int64))
        picked = b.op("Gather", [rows, b.transpose(index, [1, 0])], {"axis": 0})  # [N*P, T^D, C]
        if weights is not None:
            picked = b.squeeze(b.op("MatMul", [b.unsqueeze(b.transpose(weights, [1, 0]), [1]), picked]), [1])
        else:
            picked = b.squeeze(picked, [1])
        return b.transpose(b.reshape(picked, self._out_shape()), [0, d + 1, *range(1, d + 1)])


def native(x_shape, grid_shape, mode, padding, align, opset) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align)], "gs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape), helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def variant(model: onnx.ModelProto, cls: type[gsd._Sampler]) -> onnx.ModelProto:
    graph = to_graph(model)
    node = graph.nodes[0]
    x, grid = node.inputs
    mode = gsd._MODES[gsd._mode(node)]
    sampler = cls(Builder(graph, "v"), x, grid, len(x.shape) - 2, mode, gsd._attr(node, "padding_mode", "zeros"),
                  bool(node.attrs.get("align_corners", 0)), tensor_dtype(x))
    replace_tensor(graph, node.outputs[0], sampler.build())
    return to_model(graph, model)


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def best_us(sessions: dict[str, ort.InferenceSession], feeds: dict[str, np.ndarray], repeats: int) -> dict[str, float]:
    best = dict.fromkeys(sessions, float("inf"))
    reference = sessions["native"].run(None, feeds)[0]
    for name, sess in sessions.items():
        np.testing.assert_allclose(sess.run(None, feeds)[0], reference, atol=1e-4, err_msg=name)
    for _ in range(repeats):
        for name, sess in sessions.items():
            start, k = time.perf_counter(), 0
            while time.perf_counter() - start < 0.05:
                sess.run(None, feeds)
                k += 1
            best[name] = min(best[name], (time.perf_counter() - start) / k * 1e6)
    return best


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    print("| case | native µs | pass µs | pass / native | element Gather µs | ratio | rows + MatMul µs | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for name, x_shape, grid_shape, mode, padding, align, opset in CASES:
        m = native(x_shape, grid_shape, mode, padding, align, opset)
        feeds = {"x": rng.standard_normal(x_shape).astype(np.float32), "grid": rng.uniform(-1.1, 1.1, grid_shape).astype(np.float32)}
        sessions = {"native": session(m), "pass": session(passes.get("gridsample-decompose").apply(m).model),
                    "element": session(variant(m, _ElementGather)), "rows": session(variant(m, _RowsMatMul))}
        t = best_us(sessions, feeds, args.repeats)
        n = t["native"]
        print(f"| {name} | {n:.0f} | {t['pass']:.0f} | {t['pass'] / n:.2f}x | {t['element']:.0f} | {t['element'] / n:.2f}x "
              f"| {t['rows']:.0f} | {t['rows'] / n:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
