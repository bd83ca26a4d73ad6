"""What the contrib-op lowerings share: which nodes are onnxruntime's contrib ops, and the
evidence that no TensorRT release imports them.

onnxruntime's transformer optimizer (and optimum's O1-O4, which call it) fuse subgraphs into
``com.microsoft`` kernels; onnxruntime also registers a few contrib ops in the default domain
(``SimplifiedLayerNormalization``, ``SkipSimplifiedLayerNormalization``). TensorRT's model importer
dispatches on ``op_type`` alone, the domain ignored (``ModelImporter.cpp``, 8.5-GA ``importNode``:
``opImporters.count(node.op_type())``; 10.1-GA the same), so a contrib op whose name no builtin
importer has goes to ``FallbackPluginImporter`` ("No importer registered for op: X. Attempting to
import as plugin", then "Plugin not found"), and one that shares an ONNX op's name (``Gelu``,
``LayerNormalization``) is imported with the ONNX op's meaning.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes._elementwise import through_producers
from graphfix.passes.base import Context

MS_DOMAIN = "com.microsoft"

#: The rules' evidence for a contrib op without a same-named builtin importer.
NO_CONTRIB_IMPORTER = (
    "importer source: ModelImporter.cpp (8.5-GA, 10.1-GA) looks importers up by op_type, domain ignored; "
    "builtin_op_importers.cpp (every branch to 10.1-GA, main) has none for this op, so the plugin fallback "
    "fails; semantics: onnxruntime ContribOperators.md / the schema onnxruntime registers"
)


def microsoft(node: gs.Node, ctx: Context) -> bool:
    """A node of onnxruntime's ``com.microsoft`` domain."""
    return (node.domain or "") == MS_DOMAIN


def microsoft_or_default(node: gs.Node, ctx: Context) -> bool:
    """A contrib op onnxruntime registers in both the default and the ``com.microsoft`` domain."""
    return (node.domain or "") in ("", "ai.onnx", MS_DOMAIN)


def float_type(node: gs.Node, *candidates: int) -> np.dtype:
    """The compute type: the first of these inputs whose type is a known float type.

    onnx's shape inference knows no contrib op, so everything after the first one is untyped;
    the weights (gamma, bias, the packed QKV weights, the embedding tables) always say the type.
    """
    for k in candidates:
        if k < len(node.inputs) and node.inputs[k].name:
            dtype = tensor_dtype(node.inputs[k]) or through_producers(node.inputs[k])
            if dtype is not None:
                if dtype.kind != "f":
                    break
                return dtype
    raise Skip(f"the type of {node.op} is unknown or not a numpy float (bfloat16 is left as is)")


def replace_typed(graph: gs.Graph, old: gs.Tensor, new: gs.Tensor, dtype: np.dtype) -> None:
    """replace_tensor, and ``old`` typed ``dtype`` where inference left it untyped (after a contrib op):
    the next contrib op reads its type from it."""
    replace_tensor(graph, old, new)
    if old.dtype is None:
        old.dtype = dtype

