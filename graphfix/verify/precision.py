"""The precision a value was computed in: the lowest float type on its way, not only its own type.

A float16 model converted with fp32 inputs and outputs (onnxconverter-common's ``keep_io_types``)
computes in float16 and ends in ``Cast(to=FLOAT)``: its outputs are float32, but they carry
float16 rounding. A correct rewrite of a norm or an activation inside it moves them by a float16
unit in the last place (a Gelu decomposed in an MLP: 2e-5 to 5e-4), far over float32's 1e-5, and
the original model's noise floor need not show it (its float32 inputs moved by one float32 ulp
rarely change their float16 cast). So comparisons ask for the precision a value was computed in:
for a rewritten region, the lowest float type among the tensors it reads, computes and writes;
for a model output, the lowest float type among the tensors it is computed from. Only float16
and bfloat16 count as low; every other type keeps the tolerance asked for.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from graphfix.onnxio.proto import Assembled

#: Machine epsilon of the float types whose rounding widens a comparison (bfloat16: 8 bits of
#: mantissa; numpy has no bfloat16 of its own, ml_dtypes names it).
EPSILON = {"float16": float(np.finfo(np.float16).eps), "bfloat16": 2.0**-7}


def _name(dtype) -> str | None:
    if dtype is None:
        return None
    try:
        return np.dtype(dtype).name
    except TypeError:
        return "bfloat16" if dtype == 16 else None  # onnx's BFLOAT16, where the type was kept as onnx's


def epsilon(dtype) -> float:
    """The epsilon of ``dtype`` when it is float16 or bfloat16 (numpy's or onnx's spelling), else 0."""
    return EPSILON.get(_name(dtype) or "", 0.0)


def lowest(dtypes: Iterable) -> str | None:
    """The lowest-precision low float type among ``dtypes`` ("float16", "bfloat16"), or None."""
    found = [n for n in map(_name, dtypes) if n in EPSILON]
    return max(found, key=EPSILON.__getitem__) if found else None


def _tensor_types(tensors: Iterable[gs.Tensor]) -> list:
    return [t.dtype for t in tensors if t is not None and t.name]


def of_tensors(nodes: Iterable[gs.Node], extra: Iterable[gs.Tensor] = ()) -> str | None:
    """The precision of a computation made of ``nodes`` (every tensor they read and write) and the
    ``extra`` tensors (a rewrite's matched node as it was)."""
    types = _tensor_types(extra)
    for n in nodes:
        types += _tensor_types(n.inputs) + _tensor_types(n.outputs)
    return lowest(types)


_LOW_ONNX = {onnx.TensorProto.FLOAT16: EPSILON["float16"], onnx.TensorProto.BFLOAT16: EPSILON["bfloat16"]}
#: ops whose output type an attribute sets (every other op's follows its inputs'), and the ops
#: with bodies (a body can cast)
_TYPED_BY_ATTRIBUTE = frozenset({"Cast", "Constant", "ConstantOfShape", "EyeLike", "RandomNormal", "RandomUniform",
                                 "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "If", "Loop", "Scan"})


def _attribute_types(n: onnx.NodeProto) -> list[int]:
    """The tensor types a node's attributes name (Cast's ``to``, a Constant's value, a body's
    inputs, outputs, weights and such types of its own nodes)."""
    found = []
    for a in n.attribute:
        if a.name in ("to", "dtype"):
            found.append(a.i)
        elif a.HasField("t"):
            found.append(a.t.data_type)
        for body in [a.g] if a.HasField("g") else list(a.graphs):
            found += [vi.type.tensor_type.elem_type for vi in (*body.input, *body.output)]
            found += [t.data_type for t in body.initializer]
            found += [t for m in body.node if m.op_type in _TYPED_BY_ATTRIBUTE for t in _attribute_types(m)]
    return found


def computed_in(model: onnx.ModelProto | Assembled) -> dict[str, str]:
    """Per graph output computed through float16 or bfloat16: the lowest such type on its way.

    Read from where a type can enter a computation (every other op's output type follows its
    inputs'): the graph's inputs, its weights, and the ops an attribute types (Cast's ``to``, a
    Constant's value; an If/Loop/Scan's bodies), carried forward through the nodes in the file's
    (topological) order. Made only when an end-to-end comparison at the outputs' own types failed,
    so a float32 model that passes it never pays."""
    g = model.stub.graph if isinstance(model, Assembled) else model.graph
    initializers = model.initializers if isinstance(model, Assembled) else g.initializer
    low: dict[str, float] = {}
    for name, elem_type in [*((vi.name, vi.type.tensor_type.elem_type) for vi in g.input),
                            *((t.name, t.data_type) for t in initializers)]:
        if elem_type in _LOW_ONNX:
            low[name] = _LOW_ONNX[elem_type]
    for n in g.node:
        found = max([low.get(i, 0.0) for i in n.input]) if n.input else 0.0
        op = n.op_type
        if op == "Cast":  # most of them: one int attribute
            found = max(found, _LOW_ONNX.get(n.attribute[0].i, 0.0) if len(n.attribute) == 1 else
                        max([0.0, *(_LOW_ONNX.get(t, 0.0) for t in _attribute_types(n))]))
        elif op in _TYPED_BY_ATTRIBUTE:
            found = max([found, *(_LOW_ONNX.get(t, 0.0) for t in _attribute_types(n))])
        if found:
            for o in n.output:
                low[o] = found
    names = {v: k for k, v in EPSILON.items()}
    out: dict[str, str] = {}
    for vi in g.output:
        found = max(low.get(vi.name, 0.0), _LOW_ONNX.get(vi.type.tensor_type.elem_type, 0.0))
        if found:
            out[vi.name] = names[found]
    return out
