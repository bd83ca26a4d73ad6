"""Small graph edits that keep tensor names (graph outputs and users' node names survive rewrites)."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph.edits import note_replaced


def tensor_dtype(t: gs.Tensor) -> np.dtype | None:
    """numpy dtype of a tensor, or None when inference could not tell."""
    if isinstance(t, gs.Constant):
        return np.dtype(t.dtype)
    if t.dtype is None:
        return None
    try:
        return np.dtype(t.dtype)
    except TypeError:
        return None


def static_shape(t: gs.Tensor) -> tuple[int, ...] | None:
    """The shape if every dim is a known non-negative int, else None."""
    shape = t.shape
    if shape is None or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        return None
    return tuple(int(d) for d in shape)


def is_read(t: gs.Tensor, graph: gs.Graph) -> bool:
    """Something reads ``t``: a node (subgraphs included) or the graph's outputs (an optional
    output nobody reads need not be built)."""
    return bool(t.name) and (bool(t.outputs) or t in graph.outputs)


def replace_tensor(graph: gs.Graph, old: gs.Variable, new: gs.Tensor) -> None:
    """Make the graph compute ``old`` from ``new``'s producer, so ``old``'s name and consumers stay.

    The node that currently produces ``old`` loses that output (cleanup() then drops it when it
    has no other used outputs). Where ``new`` has no producer (a graph input or a Constant),
    an Identity keeps ``old`` defined.
    """
    if new is old:
        return

    for node in list(old.inputs):
        idx = node.outputs.index(old)
        note_replaced(old, node, idx)
        node.outputs[idx] = gs.Variable(f"{old.name}__replaced", dtype=old.dtype)
    producer = new.inputs[0] if isinstance(new, gs.Variable) and new.inputs else None
    if producer is None:
        graph.nodes.append(gs.Node("Identity", name=f"{old.name}/gf.Identity", inputs=[new], outputs=[old]))
        return
    producer.outputs[producer.outputs.index(new)] = old
    if old.dtype is None:
        old.dtype = new.dtype
    # Consumers of the temporary tensor now read ``old``.
    for consumer in list(new.outputs):
        for i, inp in enumerate(consumer.inputs):
            if inp is new:
                consumer.inputs[i] = old

