"""An If as TensorRT's importer sees it: its branch outputs in pairs, and whether its condition is
a build-time constant (weights select one branch; anything else builds an IIfConditional of both,
whose output layers want both branches' outputs of one shape: 8.5-GA builtin_op_importers.cpp
importIf, 10.1-GA onnxOpImporters.cpp)."""

from __future__ import annotations

import onnx_graphsurgeon as gs

from graphfix.analysis.fold import Folder
from graphfix.graph import is_weights


def branch_pairs(node: gs.Node) -> list[tuple[gs.Tensor, gs.Tensor]] | None:
    """(then output k, else output k) for every k; None for a malformed If (a branch missing, or
    output counts that differ)."""
    then, other = node.attrs.get("then_branch"), node.attrs.get("else_branch")
    if not isinstance(then, gs.Graph) or not isinstance(other, gs.Graph) or len(then.outputs) != len(other.outputs):
        return None
    return list(zip(then.outputs, other.outputs, strict=True))


def runtime_condition(node: gs.Node, folder: Folder) -> bool:
    """Not a build-time constant: TensorRT builds an IIfConditional (an initializer condition is
    inlined by the importer, one that folds by graphfix's if-inline)."""
    return bool(node.inputs) and not is_weights(node.inputs[0]) and folder.value(node.inputs[0]) is None
