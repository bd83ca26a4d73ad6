"""onnxruntime CPU latency of DeformConv vs what deformconv-decompose writes, and vs a
GridSample-based alternative, as ratios to the native op.

    python bench/deformconv_latency.py [--repeat 5]

Columns: the native op (onnxruntime's kernel), the pass's form (one Transpose to rows
[N*og*H*W, C/og], one Gather of rows per bilinear corner, a grouped MatMul), and the rejected
alternative: one GridSample (bilinear, zeros, align_corners=1) per image and offset group over a
grid of every tap's coordinates, then the same MatMul. GridSample has no importer before 8.5 and
is what gridsample-decompose would rewrite there, so the alternative only helps 8.5-10.0.
One thread, best of ``repeat`` 0.1 s windows (bench/_latency.py), fp32.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _latency import latency_us  # noqa: E402

from graphfix import passes  # noqa: E402

CASES = [  # name, (n, c, h, w), m, kernel, offset_group, mask
    ("DCNv2 1x64x32x32 -> 64, 3x3, mask", (1, 64, 32, 32), 64, 3, 1, True),
    ("DCNv1 1x32x48x48 -> 32, 3x3, 2 offset groups", (1, 32, 48, 48), 32, 3, 2, False),
    ("PP-OCR-ish 1x16x64x64 -> 16, 3x3, mask", (1, 16, 64, 64), 16, 3, 1, True),
]


def _native(shape, m, k, og, mask) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    n, c, h, w = shape
    names = ["x", "w", "offset", "b"] + (["mask"] if mask else [])
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, [m, c, k, k], (0.1 * rng.standard_normal((m, c, k, k))).astype(np.float32).ravel()),
             helper.make_tensor("b", TensorProto.FLOAT, [m], rng.standard_normal(m).astype(np.float32))]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w]),
           helper.make_tensor_value_info("offset", TensorProto.FLOAT, [n, og * k * k * 2, h, w])]
    ins += [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [n, og * k * k, h, w])] if mask else []
    node = helper.make_node("DeformConv", names, ["y"], kernel_shape=[k, k], pads=[k // 2] * 4, offset_group=og)
    graph = helper.make_graph([node], "deform", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m, h, w])], inits)
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32),
             "offset": (2 * rng.standard_normal((n, og * k * k * 2, h, w))).astype(np.float32),
             "mask": rng.uniform(0, 1, (n, og * k * k, h, w)).astype(np.float32)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), \
        {key: v for key, v in feeds.items() if key in names}


def _gridsample(shape, m, k, og, mask) -> onnx.ModelProto:
    """The rejected alternative, written out with onnx.helper (same inputs as the native model)."""
    n, c, h, w = shape
    kk, cg = k * k, c // og
    ii, jj = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    base_y = (np.arange(h)[None, :, None] - k // 2 + ii.reshape(-1)[:, None, None]).astype(np.float32) * np.ones((1, 1, w), np.float32)
    base_x = (np.arange(w)[None, None, :] - k // 2 + jj.reshape(-1)[:, None, None]).astype(np.float32) * np.ones((1, h, 1), np.float32)
    c_ = [helper.make_tensor(name, TensorProto.FLOAT if v.dtype == np.float32 else TensorProto.INT64, v.shape, v.ravel())
          for name, v in {"by": base_y, "bx": base_x, "sy": np.float32(2 / (h - 1)), "sx": np.float32(2 / (w - 1)),
                          "one": np.float32(1), "s_off": np.array([n, og, kk, 2, h, w]), "s_x": np.array([n * og, cg, h, w]),
                          "s_grid": np.array([n * og, kk * h, w, 2]), "s_mask": np.array([n * og, 1, kk * h, w]),
                          "s_cols": np.array([n, c * kk, h * w]), "s_w": np.array([m, c * kk]), "s_y": np.array([n, m, h, w]),
                          "s_b": np.array([m, 1, 1]), "i0": np.array([0]), "i1": np.array([1]), "i2": np.array([2]),
                          "ax3": np.array([3])}.items()]
    nodes = [
        helper.make_node("Reshape", ["offset", "s_off"], ["off"]),
        helper.make_node("Slice", ["off", "i0", "i1", "ax3"], ["dy5"]), helper.make_node("Slice", ["off", "i1", "i2", "ax3"], ["dx5"]),
        helper.make_node("Squeeze", ["dy5", "ax3"], ["dy"]), helper.make_node("Squeeze", ["dx5", "ax3"], ["dx"]),
        helper.make_node("Add", ["dy", "by"], ["py"]), helper.make_node("Add", ["dx", "bx"], ["px"]),
        helper.make_node("Mul", ["py", "sy"], ["gy0"]), helper.make_node("Sub", ["gy0", "one"], ["gy"]),
        helper.make_node("Mul", ["px", "sx"], ["gx0"]), helper.make_node("Sub", ["gx0", "one"], ["gx"]),
        helper.make_node("Unsqueeze", ["gx", "i0"], ["gx1"]), helper.make_node("Unsqueeze", ["gy", "i0"], ["gy1"]),
        helper.make_node("Concat", ["gx1", "gy1"], ["g6"], axis=0),  # [2, N, og, K, H, W]
        helper.make_node("Transpose", ["g6"], ["g7"], perm=[1, 2, 3, 4, 5, 0]),
        helper.make_node("Reshape", ["g7", "s_grid"], ["grid"]),
        helper.make_node("Reshape", ["x", "s_x"], ["xg"]),
        helper.make_node("GridSample", ["xg", "grid"], ["sampled"], mode="bilinear", padding_mode="zeros", align_corners=1),
    ]
    last = "sampled"
    if mask:
        nodes += [helper.make_node("Reshape", ["mask", "s_mask"], ["mk"]), helper.make_node("Mul", ["sampled", "mk"], ["masked"])]
        last = "masked"
    nodes += [helper.make_node("Reshape", [last, "s_cols"], ["cols"]), helper.make_node("Reshape", ["w", "s_w"], ["wm"]),
              helper.make_node("MatMul", ["wm", "cols"], ["mm"]), helper.make_node("Reshape", ["mm", "s_y"], ["y0"]),
              helper.make_node("Reshape", ["b", "s_b"], ["bb"]), helper.make_node("Add", ["y0", "bb"], ["y"])]
    native, _ = _native(shape, m, k, og, mask)
    read = {name for node in nodes for name in node.input}
    graph = helper.make_graph(nodes, "gridsample_alt", list(native.graph.input), list(native.graph.output),
                              list(native.graph.initializer) + [t for t in c_ if t.name in read])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"{'case':48} {'native us':>10} {'pass':>7} {'gridsample':>11}")
    for name, shape, m, k, og, mask in CASES:
        native, feeds = _native(shape, m, k, og, mask)
        decomposed = passes.get("deformconv-decompose").apply(native).model
        alternative = _gridsample(shape, m, k, og, mask)
        from onnxruntime import InferenceSession

        want = InferenceSession(native.SerializeToString()).run(None, feeds)[0]
        for model in (decomposed, alternative):  # both forms compute the op, or the ratio means nothing
            got = InferenceSession(model.SerializeToString()).run(None, feeds)[0]
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
        base = latency_us(native, feeds, args.repeat)
        ours = latency_us(decomposed, feeds, args.repeat)
        alt = latency_us(alternative, feeds, args.repeat)
        print(f"{name:48} {base:10.0f} {ours / base:6.2f}x {alt / base:10.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
