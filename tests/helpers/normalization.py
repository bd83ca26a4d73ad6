"""What the normalization passes' tests share: onnxruntime without graph optimisations (it would fuse
a decomposition back into its own kernel), a tolerance check, the ops of a model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from graphfix.onnxio.ir import runtime_compatible


def plain_run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime without graph optimisations (no LayerNormFusion back into the native op)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(runtime_compatible(m).SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_close(got: list[np.ndarray], want: list[np.ndarray], tol: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), atol=tol, rtol=tol)


def ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]

