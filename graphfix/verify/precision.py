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
import onnx_graphsurgeon as gs

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


def computed_in(graph: gs.Graph) -> dict[str, str]:
    """Per graph output computed through float16 or bfloat16 somewhere: the lowest such type among
    the tensors it is computed from (itself included). One walk over the graph, iterative (a
    100k-node chain is no recursion), each tensor visited once."""
    memo: dict[int, float] = {}
    names: dict[float, str] = {v: k for k, v in EPSILON.items()}

    def low(root: gs.Tensor) -> float:
        stack = [(root, False)]
        while stack:
            t, expanded = stack.pop()
            if id(t) in memo:
                continue
            producer = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
            sources = [] if producer is None else [i for i in producer.inputs if i is not None and i.name]
            pending = [] if expanded else [s for s in sources if id(s) not in memo]
            if pending:
                stack.append((t, True))
                stack.extend((s, False) for s in pending)
                continue
            memo[id(t)] = max([epsilon(t.dtype), *(memo.get(id(s), 0.0) for s in sources)])
        return memo[id(root)]

    out: dict[str, str] = {}
    for t in graph.outputs:
        eps = low(t)
        if eps:
            out[t.name] = names[eps]
    return out
