"""An op's ``axis`` attribute read against the rank: one out of ``[-rank, rank)`` is a node
onnxruntime refuses, so the pass reports it (Skip, a finding) instead of rewriting; read raw, a
fuzzed ``axis`` of -2147483649 built a list of 2**31 axes (a hang) in the passes that expand it."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from graphfix.graph.build import Skip


def checked_axis(node: gs.Node, rank: int, default: int, name: str = "axis") -> int:
    """``node``'s ``name`` attribute (``default`` when absent) as an axis in ``[0, rank)``."""
    axis = int(node.attrs.get(name, default))
    if not -rank <= axis < rank:
        raise Skip(f"{name} {axis} is out of range for a rank-{rank} {'output' if node.op == 'OneHot' else 'input'} (onnxruntime refuses it)")
    return axis + rank if axis < 0 else axis
