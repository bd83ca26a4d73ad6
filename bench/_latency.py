"""One way to time a model on onnxruntime for the latency benches: one thread, a warm-up run,
then the best of ``repeat`` windows of 0.1 s (mean time per run inside a window)."""

from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort

from graphfix.onnxio.ir import runtime_compatible


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    """A one-thread CPU session with onnxruntime's default optimizations (what deploy code runs)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(runtime_compatible(model).SerializeToString(), opts, providers=["CPUExecutionProvider"])


def window_us(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], seconds: float = 0.1) -> float:
    """Mean microseconds per run over one window of ``seconds``."""
    start, k = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        sess.run(None, feeds)
        k += 1
    return (time.perf_counter() - start) / k * 1e6


def latency_us(model: onnx.ModelProto, feeds: dict[str, np.ndarray], repeat: int = 5) -> float:
    sess = session(model)
    sess.run(None, feeds)
    return min(window_us(sess, feeds) for _ in range(repeat))
