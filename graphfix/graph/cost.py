"""What nodes cost to run, as a device-independent estimate: floating-point operations and bytes moved.

Issue 24: a rewrite TensorRT accepts can still make the model several times slower (a scatter
reduction as a one-hot MatMul), and a user should see that before deploying. The estimate is the
one ``bench/rewrite_cost.py`` tabulates in docs/performance.md: MatMul/Gemm/Conv/ConvTranspose by
their multiply-adds (two operations each), every other node one operation per element of its
largest input or output; bytes are every input and output read or written once. Constant nodes
cost nothing. One function (:func:`node_cost`) serves the bench (shapes from an onnxruntime run)
and the report (the shapes graphfix's own inference gives, no session): a node with a tensor of
unknown or symbolic size has no estimate and is counted apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

#: Bytes per element of the types exports use (4 for the rest).
ITEMSIZE = {onnx.TensorProto.DOUBLE: 8, onnx.TensorProto.INT64: 8, onnx.TensorProto.FLOAT16: 2,
            onnx.TensorProto.BFLOAT16: 2, onnx.TensorProto.BOOL: 1, onnx.TensorProto.INT8: 1, onnx.TensorProto.UINT8: 1}

#: (dims, element type) of one tensor; None when not known.
Shape = tuple[tuple[int, ...], int]


@dataclass
class Cost:
    flops: float = 0.0
    bytes: float = 0.0
    unknown: int = 0  # nodes left out: a tensor of unknown size

    def add(self, node: tuple[float, float] | None) -> None:
        if node is None:
            self.unknown += 1
        else:
            self.flops += node[0]
            self.bytes += node[1]


def elements(dims: Sequence[int]) -> int:
    return int(np.prod(dims, dtype=np.int64)) if len(dims) else 1


def node_cost(op: str, ins: Sequence[Shape | None], outs: Sequence[Shape | None], trans_a: bool = False) -> tuple[float, float] | None:
    """(FLOPs, bytes) of one node whose present inputs and outputs have these shapes (None: a
    size is unknown); a Constant costs nothing."""
    if op == "Constant":
        return 0.0, 0.0
    if any(s is None for s in (*ins, *outs)):
        return None
    moved = float(sum(elements(d) * ITEMSIZE.get(t, 4) for d, t in (*ins, *outs)))  # type: ignore[misc]
    out_elems = sum(elements(d) for d, _ in outs)  # type: ignore[misc]
    a = ins[0][0] if ins else ()  # type: ignore[index]
    w = ins[1][0] if len(ins) > 1 else ()  # type: ignore[index]
    if op == "MatMul" and a:
        return 2.0 * out_elems * a[-1], moved
    if op == "Gemm" and a:
        return 2.0 * out_elems * (a[0] if trans_a else a[-1]), moved
    if op == "Conv" and len(w) >= 3:  # w: [Cout, Cin/group, k...]
        return 2.0 * out_elems * elements(w[1:]), moved
    if op == "ConvTranspose" and len(w) >= 3:  # w: [Cin, Cout/group, k...]
        return 2.0 * elements(a) * elements(w[1:]), moved
    return float(max(out_elems, max((elements(d) for d, _ in ins), default=0))), moved  # type: ignore[misc]


def _known(t: gs.Tensor) -> Shape | None:
    """A graph tensor's static (dims, element type), as graphfix's shape inference left it."""
    shape = t.shape
    if shape is None or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        return None
    dtype = t.dtype
    try:
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)) if dtype is not None and not isinstance(dtype, int) else (dtype or 1)
    except (TypeError, ValueError, KeyError):
        elem = onnx.TensorProto.FLOAT
    return tuple(int(d) for d in shape), int(elem)


def gs_node_cost(op: str, inputs: Iterable[gs.Tensor], outputs: Iterable[gs.Tensor], attrs: dict) -> tuple[float, float] | None:
    """:func:`node_cost` of an onnx-graphsurgeon node (or a node's saved op, tensors and attributes)."""
    return node_cost(op, [_known(t) for t in inputs if t.name], [_known(t) for t in outputs if t.name],
                     bool(attrs.get("transA", 0)))


def nodes_cost(nodes: Iterable[gs.Node]) -> Cost:
    cost = Cost()
    for n in nodes:
        cost.add(gs_node_cost(n.op, n.inputs, n.outputs, n.attrs))
    return cost
