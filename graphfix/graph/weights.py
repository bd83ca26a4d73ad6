"""The one answer to "is this input weights?", the question TensorRT's importer asks of many inputs.

TensorRT's ONNX parser calls an input *weights* when it is an initializer or the output of a
Constant node; anything else, however constant, is an ITensor and fails every "must be an
initializer" check (Clip bounds before 8.2, Pad pads before 8.2, CumSum axis, TopK K before 8.6,
Conv weights, InstanceNormalization scale/bias, Squeeze/Unsqueeze axes before 10.7, ...).
"""

from __future__ import annotations

import onnx_graphsurgeon as gs


def is_empty(t: gs.Tensor | None) -> bool:
    """An absent optional input (no tensor, or the empty name)."""
    return t is None or not t.name


def is_weights(t: gs.Tensor | None, empty: bool = True) -> bool:
    """Initializer or Constant output. An absent optional input counts as weights unless
    ``empty=False`` (TensorRT 7.x crashed on an empty optional Clip bound, for example)."""
    if is_empty(t):
        return empty
    if isinstance(t, gs.Constant):
        return True
    return bool(t.inputs) and t.inputs[0].op == "Constant"


def optional_input(node: gs.Node, k: int) -> gs.Tensor | None:
    """Input ``k`` of ``node``, or None when it is absent or empty."""
    return node.inputs[k] if len(node.inputs) > k and node.inputs[k].name else None
