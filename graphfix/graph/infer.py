"""Output dtypes and shapes of newly built nodes, one node at a time (ONNX's own per-node inference).

Whole-model shape inference needs an export; passes that build nodes need the dtypes of what
earlier passes built (a BOOL Gather made by a GatherND decomposition, for instance). Running
ONNX's inference function of each new node on its inputs' known types costs time linear in the
nodes built.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

#: Constant inputs up to this many elements are given to inference as data (Reshape targets...).
_DATA_LIMIT = 64


def _elem_type(dtype: object) -> int | None:
    if dtype is None:
        return None
    if isinstance(dtype, int):
        return dtype
    try:
        return _np_to_onnx(np.dtype(dtype))
    except (TypeError, KeyError, ValueError):
        return None


@functools.cache
def _np_to_onnx(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(dtype)


def _type_proto(t: gs.Tensor) -> onnx.TypeProto | None:
    elem = _elem_type(t.dtype)
    if elem is None:
        return None
    shape = None if t.shape is None else [d if isinstance(d, (int, np.integer)) and d >= 0 else (d if isinstance(d, str) else None) for d in t.shape]
    return helper.make_tensor_type_proto(elem, shape)


def infer_nodes(nodes: Iterable[gs.Node], opset: int) -> None:
    """Fill in missing output dtype/shape of ``nodes`` (given in build order)."""
    for node in nodes:
        if all(o.dtype is not None and o.shape is not None for o in node.outputs):
            continue
        if (node.domain or "") not in ("", "ai.onnx") or any(isinstance(v, gs.Graph) for v in node.attrs.values()):
            continue
        try:
            schema = onnx.defs.get_schema(node.op, opset, "")
        except Exception:  # noqa: BLE001 - unknown op: leave the types unknown
            continue
        types, data = {}, {}
        for t in node.inputs:
            if not t.name:
                continue
            tp = _type_proto(t)
            if tp is None:
                break
            types[t.name] = tp
            if isinstance(t, gs.Constant) and t.shape is not None and int(np.prod(t.shape)) <= _DATA_LIMIT:
                data[t.name] = numpy_helper.from_array(np.asarray(t.values), t.name)
        else:
            try:
                outs = onnx.shape_inference.infer_node_outputs(
                    schema, OnnxExporter.export_node(node), types, data, opset_imports=[helper.make_opsetid("", opset)]
                )
            except Exception:  # noqa: BLE001 - inference is best effort, rewrites stay valid without it
                continue
            for o in node.outputs:
                tp = outs.get(o.name)
                if tp is None or not tp.HasField("tensor_type"):
                    continue
                tt = tp.tensor_type
                if o.dtype is None and tt.elem_type:
                    o.dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
                if o.shape is None and tt.HasField("shape"):
                    o.shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
