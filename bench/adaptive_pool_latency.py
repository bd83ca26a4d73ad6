"""onnxruntime CPU latency of what aten-fallback writes for ATen adaptive pooling, as ratios.

    python bench/adaptive_pool_latency.py

There is no native op to compare with (onnxruntime cannot run ATen), so the yardstick is one
AveragePool/MaxPool with ``stride = floor(in/out)``, ``kernel = in - (out-1)*stride``: the
errors.json workaround, exact only when ``in % out == 0``. For non-dividing sizes the rewrite is
exact (MatMul with a bins matrix for averages, Slice + ReduceMax per window for maxima), and the
ratio says what exactness costs. Single-threaded onnxruntime, fp32, best of repeated runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _latency import latency_us  # noqa: E402

from fixtures.recipes._onnx import FLOAT, const, inp, model, node, out  # noqa: E402
from fixtures.recipes.aten_fallback import aten, aten_model  # noqa: E402
from graphfix import passes  # noqa: E402

CASES = [(256, 13, 7, "avg"), (256, 14, 7, "avg"), (512, 20, 7, "avg"), (64, 56, 9, "avg"), (256, 13, 7, "max"), (64, 56, 9, "max")]


def rewritten(c: int, hw: int, o: int, mode: str) -> onnx.ModelProto:
    m = aten_model([const("os", [o, o], np.int64), aten(f"adaptive_{mode}_pool2d", ["x", "os"], ["y"])],
                   [inp("x", FLOAT, [1, c, hw, hw])], [out("y", FLOAT, [1, c, o, o])])
    return passes.get("aten-fallback").apply(m).model


def one_pool(c: int, hw: int, o: int, mode: str) -> onnx.ModelProto:
    stride = hw // o
    kernel = hw - (o - 1) * stride
    return model([node("AveragePool" if mode == "avg" else "MaxPool", ["x"], ["y"], kernel_shape=[kernel] * 2, strides=[stride] * 2)],
                 [inp("x", FLOAT, [1, c, hw, hw])], [out("y", FLOAT, [1, c, o, o])])


def main() -> None:
    print("| input -> output | mode | one pool exact? | rewrite | one pool | ratio |")
    print("|---|---|---|---|---|---|")
    for c, hw, o, mode in CASES:
        x = np.random.default_rng(0).random((1, c, hw, hw), np.float32)
        a, b = latency_us(rewritten(c, hw, o, mode), {"x": x}), latency_us(one_pool(c, hw, o, mode), {"x": x})
        exact = "yes" if hw % o == 0 else "no"
        print(f"| {c}x{hw}x{hw} -> {o}x{o} | {mode} | {exact} | {a:.0f} us | {b:.0f} us | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
