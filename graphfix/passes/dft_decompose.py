"""dft-decompose: DFT (``torch.fft.fft/ifft/rfft/irfft`` from the dynamo exporter) as a MatMul with a
constant cosine/sine basis.

Why: no TensorRT parser imports DFT: no ``DEFINE_BUILTIN_OP_IMPORTER(DFT)`` in onnx-tensorrt's
builtin_op_importers.cpp (7.0 ... 9.3) nor onnxOpImporters.cpp (10.0-GA, 10.1-GA, main of May
2024); docs/operators.md lists DFT as N from 8.4-GA on, still N in the 10.6 ... 11.1 tables.

How: the transformed axis is moved next to the last (real/imaginary) axis, the two are flattened
and multiplied by the ``[n * C, bins * 2]`` matrix of :func:`graphfix.passes.stft_decompose.fourier_basis`
(``exp(-+2 pi i jk / L)``, ``1/L`` for the inverse), and the result is reshaped to ``[..., bins, 2]``
and moved back::

    x [..., n, ..., C] -Transpose-> [..., n, C] -Reshape-> [..., n*C] -MatMul(basis)->
    [..., bins*2] -Reshape-> [..., bins, 2] -Transpose-> [..., bins, ..., 2]

(no Transpose when the axis is already the last signal axis, as ``torch.fft`` on the last dim
gives). ``dft_length`` shorter than the axis gives the basis zero rows (the signal is truncated),
longer pads nothing: the missing positions simply have no row. onesided keeps ``L // 2 + 1``
bins. The inverse of a one-sided spectrum (``irfft``, opset 20) is real: ``x[n] = 1/L sum_k c_k
(Re X_k cos - Im X_k sin)(2 pi k n / L)`` with ``c_k = 2`` except for the DC and (even L) Nyquist
bins, whose imaginary parts drop out as in numpy, one output column per sample. Every output is
one dot product, exact to float rounding (onnxruntime's own DFT of a length that is not a power of
two is not: see stft-decompose). The axis (and ``dft_length``) must be constants, the axis length
static and the basis below 16M elements; other cases are findings.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor
from graphfix.graph.build import Skip
from graphfix.passes._fourier import check_size, constant_int, float_dtype, fourier_basis
from graphfix.passes.base import NO_IMPORTER, Context, Pass, Rule


def irfft_basis(bins: int, length: int, channels: int) -> np.ndarray:
    """The inverse of a one-sided spectrum as ``[bins * channels, length]`` (float64): row ``k *
    channels + c`` (bin ``k``, real or imaginary part), column ``n`` (output sample)."""
    k, n = np.arange(bins)[:, None], np.arange(length)[None, :]
    theta = 2 * np.pi * ((k * n) % length) / length
    weight = np.where((k == 0) | (2 * k == length), 1.0, 2.0) * (k <= length // 2) / length
    basis = np.zeros((bins, channels, length))
    basis[:, 0] = weight * np.cos(theta)
    if channels == 2:
        basis[:, 1] = -weight * np.sin(theta)
    return basis.reshape(bins * channels, length)


def rewrite(node: gs.Node, ctx: Context) -> None:
    x, y, b = node.inputs[0], node.outputs[0], ctx.builder
    dtype = float_dtype(x, "DFT")
    shape = list(x.shape) if x.shape is not None else None
    if shape is None or len(shape) < 2 or shape[-1] not in (1, 2):
        raise Skip("the input's rank and its last dim (1 real, 2 complex) must be known")
    rank, channels = len(shape), int(shape[-1])
    if ctx.opset >= 20:
        axis = constant_int(node, 2, ctx, "axis", "which axis the basis multiplies")
        axis = -2 if axis is None else axis
    else:
        axis = int(node.attrs.get("axis", 1))
    axis %= rank
    if axis == rank - 1:
        raise Skip("DFT along the real/imaginary axis")
    n = shape[axis]
    if not isinstance(n, int | np.integer) or n <= 0:
        raise Skip("the transformed axis must have a static length (it sets the basis)")
    n = int(n)
    given = constant_int(node, 1, ctx, "dft_length", "the basis")
    inverse, onesided = bool(node.attrs.get("inverse", 0)), bool(node.attrs.get("onesided", 0))
    if inverse and onesided:
        length = given if given is not None else 2 * (n - 1)
        bins, parts = length, 1
        if length <= 0 or channels != 2:
            raise Skip("irfft of a real input or of a single bin without dft_length")
        if n > length // 2 + 1:
            raise Skip(f"irfft of {n} bins to {length} samples: the bins past the Nyquist one are dropped by "
                       "numpy and the ONNX reference but not by onnxruntime, so there is no one answer to keep")
        check_size(n * channels * length)
        basis = irfft_basis(n, length, channels)
    else:
        length = given if given is not None else n
        if length <= 0:
            raise Skip("dft_length must be positive")
        bins, parts = (length // 2 + 1 if onesided else length), 2
        check_size(n * channels * bins * 2)
        basis = fourier_basis(n, length, bins, channels, inverse=inverse)
    last = rank - 2
    perm = [*(d for d in range(last + 1) if d != axis), axis, rank - 1] if axis != last else None
    if perm is not None:
        x = b.transpose(x, perm)
    lead = [0] * last
    flat = b.reshape(x, np.array([*lead, n * channels], np.int64))
    product = b.op("MatMul", [flat, b.const(basis.astype(dtype), hint="basis")])
    out = b.reshape(product, np.array([*lead, bins, parts], np.int64))
    if perm is not None:
        out = b.transpose(out, list(np.argsort(perm)))
    replace_tensor(ctx.graph, y, out)


PASS = Pass(
    name="dft-decompose",
    summary="Rewrite DFT (fft/ifft/rfft/irfft) as a MatMul with a constant cosine/sine basis (exact to float rounding).",
    ops=frozenset({"DFT"}),
    rules=(
        Rule(NO_IMPORTER, "all", "no DFT importer in any release", error="unsupported-op-plugin-fallback-generic",
             evidence="importer source: no DEFINE_BUILTIN_OP_IMPORTER(DFT) in builtin_op_importers.cpp 7.0-9.3 nor "
                      "onnxOpImporters.cpp 10.0-GA/10.1-GA; docs/operators.md DFT N in 8.4-GA..11.1"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
