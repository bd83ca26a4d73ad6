"""onnxruntime CPU latency and accuracy of STFT vs what stft-decompose writes.

    python bench/stft_latency.py [--seconds 30] [--repeat 5]

Rows: Whisper's front end (n_fft 400, hop 160, Hann window, 16 kHz audio) and a power-of-two
frame (n_fft 512, hop 128). Columns: the native STFT, the pass's strided Conv, and the form it
rejected (frames cut by one Gather of a constant [frames, n_fft] index, then a MatMul with the
basis); each with its largest error against numpy's float64 FFT. Single-threaded onnxruntime,
fp32, best of ``repeat`` windows (bench/_latency.py).
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
from graphfix.onnxio.ir import runtime_compatible  # noqa: E402
from graphfix.passes._fourier import fourier_basis  # noqa: E402

CASES = [("Whisper n_fft 400, hop 160", 400, 160), ("n_fft 512, hop 128", 512, 128)]


def _model(nodes: list, length: int, inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "stft", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, length, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def native(length: int, n: int, step: int, window: np.ndarray) -> onnx.ModelProto:
    return _model([helper.make_node("STFT", ["x", "step", "window"], ["y"], onesided=1)], length,
                  [numpy_helper.from_array(np.array(step, np.int64), "step"), numpy_helper.from_array(window, "window")])


def gather_matmul(length: int, n: int, step: int, window: np.ndarray) -> onnx.ModelProto:
    bins, frames = n // 2 + 1, (length - n) // step + 1
    index = (np.arange(frames)[:, None] * step + np.arange(n)[None]).astype(np.int64)
    basis = fourier_basis(n, n, bins, 1, window=window.astype(np.float64)).astype(np.float32)
    nodes = [helper.make_node("Squeeze", ["x", "axis"], ["flat"]), helper.make_node("Gather", ["flat", "index"], ["frames"], axis=1),
             helper.make_node("MatMul", ["frames", "basis"], ["spec"]), helper.make_node("Reshape", ["spec", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array([2], np.int64), "axis"), numpy_helper.from_array(index, "index"),
             numpy_helper.from_array(basis, "basis"), numpy_helper.from_array(np.array([0, 0, bins, 2], np.int64), "shape")]
    return _model(nodes, length, inits)


def reference(x: np.ndarray, n: int, step: int, window: np.ndarray) -> np.ndarray:
    frames = np.lib.stride_tricks.sliding_window_view(x[0, :, 0].astype(np.float64), n)[::step] * window
    spec = np.fft.rfft(frames, axis=-1)
    return np.stack([spec.real, spec.imag], -1)[None]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="audio length at 16 kHz")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    import onnxruntime as ort

    print(f"{'case':<28} {'form':<16} {'ms':>8} {'x native':>9} {'max err vs f64':>15}")
    for name, n, step in CASES:
        length = int(args.seconds * 16000) + n
        window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)
        x = np.random.default_rng(0).standard_normal((1, length, 1)).astype(np.float32)
        want = reference(x, n, step, window.astype(np.float64))
        base = native(length, n, step, window)
        forms = [("native STFT", base), ("pass: Conv", passes.get("stft-decompose").apply(base).model),
                 ("Gather+MatMul", gather_matmul(length, n, step, window))]
        first = None
        for form, m in forms:
            us = latency_us(m, {"x": x}, args.repeat)
            first = first or us
            got = ort.InferenceSession(runtime_compatible(m).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            print(f"{name:<28} {form:<16} {us / 1e3:>8.1f} {us / first:>8.2f}x {float(np.abs(got - want).max()):>15.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
