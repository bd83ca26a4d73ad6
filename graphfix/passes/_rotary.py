"""RotaryEmbedding's rotation, shared by rotary-embedding-decompose (the opset-23 ONNX op) and
contrib-rotary-lower (onnxruntime's com.microsoft op, whose inputs come in another order and whose
positions may be one offset). Here so that no pass module imports another."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder
from graphfix.graph.build import Skip

_INT_MAX = np.iinfo(np.int64).max


def _static(d: object) -> int | None:
    return int(d) if isinstance(d, (int, np.integer)) and d >= 0 else None


def rotate(b: Builder, node: gs.Node, x: gs.Tensor, cos: gs.Tensor, sin: gs.Tensor, positions: gs.Tensor | None,
           dtype: np.dtype) -> gs.Tensor:
    """X rotated by the caches (gathered at ``positions`` when given), as RotaryEmbedding-23 defines
    it; ``node`` gives the attributes (num_heads, rotary_embedding_dim, interleaved)."""
    if x.shape is None or len(x.shape) not in (3, 4):
        raise Skip("X must have a known rank of 3 or 4 (run shape inference upstream)")
    three_d = len(x.shape) == 3
    if three_d:
        heads, hidden = int(node.attrs.get("num_heads", 0)), _static(x.shape[2])
        if heads <= 0 or hidden is None:
            raise Skip("a 3-D X needs num_heads and a static hidden size")
        head = hidden // heads
        x4 = b.reshape(x, np.array([0, 0, heads, head], np.int64))
    else:
        head, x4 = _static(x.shape[3]), x
        if head is None:
            raise Skip("the head size (last dim of X) is not static (export with a fixed head size)")
    rd = int(node.attrs.get("rotary_embedding_dim", 0)) or head
    if rd < 0 or rd % 2 or rd > head:
        raise Skip(f"rotary_embedding_dim {rd} is negative, odd or larger than the head size {head}")
    interleaved = int(node.attrs.get("interleaved", 0))
    if interleaved not in (0, 1):  # onnxruntime does not read 7 as 1: out of the op's definition, left as it is
        raise Skip(f"interleaved {interleaved} is not one the op defines (0 or 1)")
    out = rotate_heads(b, x4, head, cos, sin, positions, rd, bool(interleaved), dtype, 2 if three_d else 1)
    if three_d:
        out = b.reshape(out, np.array([0, 0, hidden], np.int64))
    return out


def rotate_heads(b: Builder, x4: gs.Tensor, head: int, cos: gs.Tensor, sin: gs.Tensor, positions: gs.Tensor | None, rd: int,
                 interleaved: bool, dtype: np.dtype, heads_axis: int) -> gs.Tensor:
    """A 4-D ``x4`` (``head`` features last, heads on ``heads_axis``) with its first ``rd`` features
    rotated by the caches (gathered at ``positions`` when given, [B, S] -> [B, S, rd / 2])."""
    if rd % 2 or rd > head or rd <= 0:
        raise Skip(f"rotary_embedding_dim {rd} is odd or larger than the head size {head}")
    if positions is not None:
        cos = b.op("Gather", [cos, positions], {"axis": 0}, dtype=dtype)
        sin = b.op("Gather", [sin, positions], {"axis": 0}, dtype=dtype)
    cos, sin = b.unsqueeze(cos, [heads_axis]), b.unsqueeze(sin, [heads_axis])
    rotated = _rotate(b, x4 if rd == head else b.slice(x4, [0], [rd], axes=[-1]), cos, sin, rd, interleaved, dtype)
    return rotated if rd == head else b.concat([rotated, b.slice(x4, [rd], [_INT_MAX], axes=[-1])], -1)


def _rotate(b: Builder, x: gs.Tensor, cos: gs.Tensor, sin: gs.Tensor, rd: int, interleaved: bool, dtype: np.dtype) -> gs.Tensor:
    """The rotated ``rd`` features of a 4-D ``x`` (cos/sin broadcast over its heads axis)."""
    half = rd // 2
    if interleaved:
        x1 = b.slice(x, [0], [rd], axes=[-1], steps=[2])
        x2 = b.slice(x, [1], [rd], axes=[-1], steps=[2])
    else:
        x1, x2 = b.slice(x, [0], [half], axes=[-1]), b.slice(x, [half], [rd], axes=[-1])

    def mul(p: gs.Tensor, q: gs.Tensor) -> gs.Tensor:
        return b.op("Mul", [p, q], dtype=dtype)

    real = b.op("Sub", [mul(cos, x1), mul(sin, x2)], dtype=dtype)
    imag = b.op("Add", [mul(sin, x1), mul(cos, x2)], dtype=dtype)
    if not interleaved:
        return b.concat([real, imag], -1)
    pairs = b.concat([b.unsqueeze(real, [-1]), b.unsqueeze(imag, [-1])], -1)
    return b.reshape(pairs, np.array([0, 0, 0, rd], np.int64))
