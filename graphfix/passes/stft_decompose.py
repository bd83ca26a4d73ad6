"""stft-decompose: STFT as a strided Conv whose weights are the windowed cosine/sine basis.

Why: no TensorRT parser through 10.1 imports STFT ("No importer registered for op: STFT"): there
is no ``DEFINE_BUILTIN_OP_IMPORTER(STFT)`` in onnx-tensorrt's builtin_op_importers.cpp (7.0 ...
9.3) nor onnxOpImporters.cpp (10.0-GA, 10.1-GA, main of May 2024), and docs/operators.md lists
STFT as N from 8.4-GA through 10.1-GA. The operator table first says Y in 10.6, and only with
``frame_step`` and ``window`` as initializers and a real signal in FP32. A speech model's log-mel
front end exported by the dynamo exporter (``torch.stft`` -> ``STFT``, onesided, a Hann window
initializer, frame step and length constants; the legacy exporter cannot export a complex
``torch.stft`` at all) is therefore blocked on every release Jetson and desktop deployments use.

How: bin ``k`` of frame ``f`` is ``sum_n x[f*step + n] * w[n] * exp(-2 pi i k n / N)``: a
convolution of the signal with ``2*bins`` kernels of width ``N`` and stride ``step``, kernel
``2k`` holding ``w[n] cos(2 pi k n / N)`` (the real part) and ``2k+1`` holding ``-w[n] sin(...)``
(the imaginary part); a complex signal ``[B, L, 2]`` is a second input channel (``x_r + i x_i``
times ``cos - i sin``). So::

    signal [B, L, C] -Reshape/Transpose-> [B, C, 1, L] -Conv(basis [2*bins, C, 1, N], stride
    [1, step])-> [B, 2*bins, 1, frames] -Transpose-> [B, frames, 2*bins, 1] -Reshape-> [B,
    frames, bins, 2]

The Conv's own output length ``(L - N) // step + 1`` is STFT's frame count, so a dynamic signal
length needs no shape arithmetic at all. The basis is computed in float64 (angles from ``k*n mod
N``, so they stay exact for long frames) and rounded once; every output element is one dot
product of ``N`` (``2N`` complex) terms, exact to float rounding. onesided keeps ``N // 2 + 1``
bins (also for a complex signal, as onnxruntime does), two-sided all ``N``.

Measured with ``bench/stft_latency.py`` (onnxruntime 1.32, CPU, one thread, 30 s of 16 kHz audio):
for Whisper's N = 400, step 160 the Conv form takes 0.06-0.08x the time of onnxruntime's own STFT
and framing by Gather then a MatMul 0.12-0.17x; for N = 512, step 128, 0.58x and 0.78x. So the
Conv, which is also the form without shape arithmetic, is used. Its error against a float64 FFT is
4e-5 where onnxruntime's STFT is off by 1.6e-3 at N = 400: onnxruntime's DFT of a length that is
not a power of two loses about N^2 ulps, so verification computes such a model's original outputs
with the ONNX reference evaluator (``graphfix.verify.sessions``).

A window that is not a constant (computed at run time) cannot be folded into the weights: the
frames are then cut by a Conv with a one-hot kernel, multiplied by the window and transformed by
a 1x1 Conv with the basis. ``frame_step`` and ``frame_length`` must be constants (they set the
stride and the kernel), the window's length must equal ``frame_length`` (onnxruntime refuses
otherwise) and the basis must stay below 16M elements; other cases are findings.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, is_weights, optional_input, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._fourier import check_size, constant_int, float_dtype, fourier_basis
from graphfix.passes.base import MUST_BE_WEIGHTS, NO_IMPORTER, TYPE, Context, Pass, Rule


def rewrite(node: gs.Node, ctx: Context) -> None:
    x, y, b = node.inputs[0], node.outputs[0], ctx.builder
    dtype = float_dtype(x, "STFT")
    shape = list(x.shape or [])
    if len(shape) != 3 or shape[2] not in (1, 2):
        raise Skip("the signal must be [batch, length, 1] (real) or [batch, length, 2] (complex) with that last dim known")
    channels = int(shape[2])
    step = constant_int(node, 1, ctx, "frame_step", "the Conv's stride")
    window_t = optional_input(node, 2)
    length = constant_int(node, 3, ctx, "frame_length", "the Conv's kernel")
    wshape = list(window_t.shape or []) if window_t is not None else []
    wlen = int(wshape[0]) if len(wshape) == 1 and isinstance(wshape[0], int | np.integer) else None
    if window_t is not None and wlen is None:
        raise Skip("the window's length must be known")
    if length is None:
        length = wlen
    if length is None or length <= 0 or step is None or step <= 0:
        raise Skip("STFT without frame_length or window, or with a non-positive frame or step")
    if wlen is not None and wlen != length:
        raise Skip(f"window of length {wlen} for frames of {length} (onnxruntime refuses it; the spec does not say)")
    bins = length // 2 + 1 if node.attrs.get("onesided", 1) else length
    check_size(2 * bins * channels * length)
    window = ctx.folder.value(window_t) if window_t is not None else None
    if channels == 1:
        signal = b.reshape(x, np.array([0, 1, 1, -1], np.int64))
    else:
        signal = b.unsqueeze(b.transpose(x, [0, 2, 1]), [2])
    basis = fourier_basis(length, length, bins, channels,
                          window=None if window is None else np.asarray(window, np.float64).reshape(-1))
    if window_t is None or window is not None:
        weight = basis.T.reshape(2 * bins, length, channels).transpose(0, 2, 1)[:, :, None, :]
        spectrum = _conv(b, signal, weight.astype(dtype), step)
    else:  # a window computed at run time: one-hot framing, window, then the basis as a 1x1 Conv
        spectrum = _windowed_at_run_time(b, signal, window_t, basis, dtype, length, channels, step)
    frames = b.transpose(spectrum, [0, 3, 1, 2])  # [B, frames, 2*bins, 1]
    replace_tensor(ctx.graph, y, b.reshape(frames, np.array([0, 0, bins, 2], np.int64)))


def _conv(b: Builder, x: gs.Tensor, weight: np.ndarray, step: int) -> gs.Variable:
    return b.op("Conv", [x, b.const(np.ascontiguousarray(weight), hint="basis")],
                {"kernel_shape": list(weight.shape[2:]), "strides": [1, step]})


def _windowed_at_run_time(b: Builder, signal: gs.Tensor, window: gs.Tensor, basis: np.ndarray, dtype: np.dtype,
                          length: int, channels: int, step: int) -> gs.Variable:
    """[B, C, 1, L] -> frames [B, C*N, 1, F] (one-hot kernel: output channel c*N + n reads channel
    c at tap n) -> times the window -> [B, 2*bins, 1, F] by the basis as a 1x1 Conv."""
    one_hot = np.zeros((channels * length, channels, 1, length))
    for c in range(channels):
        one_hot[c * length:(c + 1) * length, c, 0, :] = np.eye(length)
    frames = b.reshape(_conv(b, signal, one_hot.astype(dtype), step), np.array([0, channels, length, -1], np.int64))
    if tensor_dtype(window) != dtype:
        window = b.cast(window, dtype)
    weighted = b.op("Mul", [frames, b.reshape(window, np.array([length, 1], np.int64))])
    flat = b.reshape(weighted, np.array([0, channels * length, 1, -1], np.int64))
    # basis rows are (n, c); the frames' channels are (c, n)
    per_channel = basis.reshape(length, channels, -1).transpose(1, 0, 2).reshape(channels * length, -1)
    return _conv(b, flat, per_channel.T[:, :, None, None].astype(dtype), 1)


def _runtime_inputs(node: gs.Node, ctx: Context) -> bool:
    window = optional_input(node, 2)
    return not is_weights(node.inputs[1]) or (window is not None and not is_weights(window))


def _complex_or_not_fp32(node: gs.Node, ctx: Context) -> bool:
    shape = node.inputs[0].shape or []
    return (len(shape) == 3 and shape[2] == 2) or tensor_dtype(node.inputs[0]) != np.float32


PASS = Pass(
    name="stft-decompose",
    summary="Rewrite STFT as a strided Conv with the windowed cosine/sine basis as weights (exact to float rounding).",
    ops=frozenset({"STFT"}),
    rules=(
        Rule(NO_IMPORTER, "<10.6", "no STFT importer", error="unsupported-op-plugin-fallback-generic",
             evidence="importer source: no DEFINE_BUILTIN_OP_IMPORTER(STFT) in builtin_op_importers.cpp 7.0-9.3 nor "
                      "onnxOpImporters.cpp 10.0-GA/10.1-GA; docs/operators.md STFT N in 8.4-GA..10.1-GA, Y from 10.6"),
        Rule(MUST_BE_WEIGHTS, ">=10.6", "frame_step and window must be initializers", _runtime_inputs,
             error="unsupported-op-plugin-fallback-generic",
             evidence="operator table 10.6 (STFT restrictions: frame_step and window must be initializers)"),
        Rule(TYPE, ">=10.6", "complex or non-FP32 signal (real FP32 only)", _complex_or_not_fp32,
             error="unsupported-op-plugin-fallback-generic",
             evidence="operator table 10.6 (STFT: real-valued signal only; types FP32)"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
