"""One way to time a model on onnxruntime for the latency benches: one thread, a warm-up run,
then the best of ``repeat`` windows of 0.1 s (mean time per run inside a window)."""

from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort

from graphfix.model_io import runtime_compatible


def latency_us(model: onnx.ModelProto, feeds: dict[str, np.ndarray], repeat: int = 5) -> float:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(runtime_compatible(model).SerializeToString(), opts, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    best = float("inf")
    for _ in range(repeat):
        start, k = time.perf_counter(), 0
        while time.perf_counter() - start < 0.1:
            sess.run(None, feeds)
            k += 1
        best = min(best, (time.perf_counter() - start) / k)
    return best * 1e6
