"""What onnx's checker alone refuses, or a model carries that nothing reads, while onnxruntime
runs the model: onnxruntime's contrib ops registered in the ONNX domain, opset imports of domains
no node uses. Neither is a refusal: graphfix checks the rest and says so in a note.

onnx.checker knows the ONNX domain's ops only: a node of another domain it skips, but an op
onnxruntime registers in the ONNX domain (``SimplifiedLayerNormalization``, which onnxruntime's
transformer optimizer writes for Llama-style models) fails the whole check with "No Op registered
for SimplifiedLayerNormalization with domain_version of N", before the checker sees the rest of
the graph. When the checker stops there, it checks a copy with those nodes in the ``com.microsoft``
domain (:func:`without_contrib_ops`), where it skips them as it skips onnxruntime's other
contrib ops; onnx's shape inference leaves their outputs untyped and goes on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import onnx

from graphfix.onnxio.dims import graphs

#: Ops onnxruntime 1.32 registers in the ONNX domain that the ONNX standard does not define
#: (``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()``, domain "", names
#: not in ``onnx.defs``; tests/onnxio/test_domains.py compares it with the installed onnxruntime):
#: its own contrib op, ops ONNX removed that it still runs, TensorRT plugin placeholders.
ORT_ONNX_DOMAIN_OPS = frozenset({
    "SimplifiedLayerNormalization",
    "Affine", "Crop", "DynamicSlice", "GRUUnit", "GivenTensorFill", "ImageScaler", "MemcpyFromHost", "MemcpyToHost",
    "ParametricSoftplus", "Scale", "ScaledTanh",
    "DisentangledAttention_TRT", "EfficientNMS_TRT", "MultilevelCropAndResize_TRT", "PyramidROIAlign_TRT",
})
#: The domain the checker's copy moves them to (it skips nodes of domains it does not know).
_CONTRIB_DOMAIN = "com.microsoft"
_STANDARD = ("", "ai.onnx")


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for g in graphs(graph):
        yield from g.node


def onnx_domain_contrib_ops(model: onnx.ModelProto) -> list[str]:
    """The onnxruntime-only ops of the ONNX domain that ``model`` uses, in first-use order."""
    return list(dict.fromkeys(n.op_type for n in _nodes(model.graph)
                              if n.op_type in ORT_ONNX_DOMAIN_OPS and n.domain in _STANDARD))


def move_contrib_ops(model: onnx.ModelProto) -> bool:
    """In place: onnxruntime's ONNX-domain ops into the ``com.microsoft`` domain (imported if it
    is not), for onnx.checker; whether any node moved."""
    moved = False
    for n in _nodes(model.graph):
        if n.op_type in ORT_ONNX_DOMAIN_OPS and n.domain in _STANDARD:
            n.domain = _CONTRIB_DOMAIN
            moved = True
    if moved and not any(imp.domain == _CONTRIB_DOMAIN for imp in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(_CONTRIB_DOMAIN, 1))
    return moved


#: onnx.checker's complaint about an op it has no schema for.
_NO_OP = re.compile(r"No Op registered for (?P<op>\w+) with domain_version")


def without_contrib_ops(data: bytes, complaint: str) -> bytes | None:
    """The checker's input again, with onnxruntime's ONNX-domain ops moved out of its way, when
    ``complaint`` is about one of them; None when it is about anything else."""
    m = _NO_OP.search(complaint)
    if m is None or m.group("op") not in ORT_ONNX_DOMAIN_OPS:
        return None
    model = onnx.load_from_string(data)
    return model.SerializeToString() if move_contrib_ops(model) else None


def notes(model: onnx.ModelProto, ops: set[str], used: set[str]) -> list[str]:
    """What the report says about these, from the op types and node domains the load's walk met
    (nothing when the model has neither)."""
    lines = []
    contrib = sorted(ops & ORT_ONNX_DOMAIN_OPS)
    if contrib:
        lines.append(f"{', '.join(contrib)}: onnxruntime-only op(s) in the ONNX domain; onnx.checker does not know "
                     f"{'it' if len(contrib) == 1 else 'them'} (\"No Op registered\"), onnxruntime runs "
                     f"{'it' if len(contrib) == 1 else 'them'}: the checker checked the rest of the model")
    used = used | {f.domain for f in model.functions} | {n.domain for f in model.functions for n in f.node}
    unused = [imp.domain for imp in model.opset_import if imp.domain not in _STANDARD and imp.domain not in used]
    if unused:
        lines.append(f"the model imports domain(s) no node uses ({', '.join(unused)}): ignored")
    return lines
