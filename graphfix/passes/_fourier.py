"""What stft-decompose and dft-decompose share: the DFT as a cosine/sine basis matrix, its size
limit, the float-type check and the constant-input reads. Here so that no pass module imports
another."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import optional_input, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import Context

#: Largest basis (elements) a rewrite may add: 64 MB of float32.
MAX_BASIS = 1 << 24


def fourier_basis(n_in: int, length: int, bins: int, channels: int, inverse: bool = False,
                  window: np.ndarray | None = None) -> np.ndarray:
    """The DFT of length ``length`` as a matrix ``[n_in * channels, bins * 2]`` (float64).

    Row ``j * channels + c``: input position ``j``, real (c = 0) or imaginary (c = 1) part;
    column ``k * 2 + p``: output bin ``k``, real (p = 0) or imaginary (p = 1) part. Positions at or
    past ``length`` get zero rows (DFT's ``dft_length`` truncates), ``window`` scales row ``j``, the
    inverse transform is ``exp(+2 pi i jk / length) / length``."""
    j, k = np.arange(n_in)[:, None], np.arange(bins)[None, :]
    theta = 2 * np.pi * ((j * k) % length) / length
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    cos, sin = np.cos(theta) * scale, sign * np.sin(theta) * scale
    if window is not None:
        cos, sin = cos * window[:, None], sin * window[:, None]
    cos[length:], sin[length:] = 0.0, 0.0
    basis = np.zeros((n_in, channels, bins, 2))
    basis[:, 0, :, 0], basis[:, 0, :, 1] = cos, sin  # real input: (cos, +-sin)
    if channels == 2:
        basis[:, 1, :, 0], basis[:, 1, :, 1] = -sin, cos  # i * x_i: (-(+-sin), cos)
    return basis.reshape(n_in * channels, bins * 2)


def float_dtype(x: gs.Tensor, what: str) -> np.dtype:
    """The float dtype the basis takes (FP32/FP16: what TensorRT's Conv and MatMul compute in)."""
    dtype = tensor_dtype(x)
    if dtype is None or dtype not in (np.float32, np.float16):
        raise Skip(f"{what} on {dtype or 'an unknown type'}: rewritten for float32/float16 only")
    return np.dtype(dtype)


def constant_int(node: gs.Node, k: int, ctx: Context, what: str, sets: str) -> int | None:
    """Input ``k`` as a Python int (None when absent); a computed value is a finding (it ``sets``
    part of the rewrite's constant layout)."""
    t = optional_input(node, k)
    if t is None:
        return None
    v = ctx.folder.value(t)
    if v is None or np.asarray(v).size != 1:
        raise Skip(f"{what} must be a constant (it sets {sets})")
    return int(np.asarray(v).reshape(()))


def check_size(elements: int) -> None:
    if elements > MAX_BASIS:
        raise Skip(f"the cosine/sine basis would have {elements} elements (more than {MAX_BASIS}); "
                   "a transform this long is better done outside the engine")
