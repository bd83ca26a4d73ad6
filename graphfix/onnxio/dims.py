"""Declared dimensions of -1 (older paddle2onnx) or 0 (spox and TorchScript-derived exports):
read as dynamic while graphfix works, given back to the written model.

What the runtimes do with them: onnxruntime 1.32 and TensorRT's importer read a negative
``dim_value`` as a dynamic dim (onnx-tensorrt ``convertOnnxDims``: ``dim_value() >= 0 ?
dim_value() : -1``, onnx_utils.hpp on 8.5-GA, importerUtils.hpp on 10.1-GA); both take a 0
literally (onnxruntime refuses any other size for such an input: "Got invalid dimensions for
input"). onnx's own shape inference and checker were never meant to see negative dims (they have
aborted the process on some), and verification must feed non-empty tensors to compare anything.

So the working copy graphfix checks, infers, rewrites and verifies has those dims cleared (no
value, no name: free dims the shape search sizes like any symbolic one), and the written model
gets the user's declarations back (:func:`restore`): they are the model's interface, which a
rewrite never changes; what a consumer makes of a 0 (an empty tensor or a dynamic dim) is the
consumer's call, not a verified rewrite's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import onnx

#: The (first) graph input/output/value_info kind per list, for notes.
_KINDS = (("input", "input"), ("output", "output"), ("value_info", "value"))


@dataclass
class DeclaredDims:
    """The -1/0 declarations a model held: tensor name -> {axis: declared value}, and where."""

    dims: dict[str, dict[int, int]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.dims)

    def update(self, other: DeclaredDims) -> None:
        self.dims.update(other.dims)
        self.kinds.update(other.kinds)

    def notes(self) -> list[str]:
        """One line per declared value (-1, 0), naming the first few tensors."""
        lines = []
        for value, meaning in ((-1, "a negative dim, which onnxruntime and TensorRT read as dynamic"),
                               (0, "0, which onnxruntime and TensorRT take literally (an empty dim)")):
            named = [f"{self.kinds[n]} '{n}' (axis {', '.join(map(str, axes))})"
                     for n, axes in ((n, [a for a, v in d.items() if (v < 0) == (value < 0)]) for n, d in self.dims.items())
                     if axes]
            if not named:
                continue
            shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
            lines.append(f"{shown} declare{'s' if len(named) == 1 else ''} {meaning}: graphfix treated "
                         f"{'it' if len(named) == 1 else 'them'} as dynamic (verification sizes such dims like any "
                         "dynamic one) and the written model keeps the declaration")
        return lines


def _infos(graph: onnx.GraphProto) -> Iterator[tuple[str, onnx.ValueInfoProto]]:
    for field_name, kind in _KINDS:
        for vi in getattr(graph, field_name):
            yield kind, vi


#: Ops whose attributes hold graphs (the walk reads no other node's attributes: on a 100k-node
#: export, every node's would cost more than the rest of the load's checks).
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and the bodies of its control-flow nodes, at any depth."""
    yield graph
    for n in graph.node:
        if n.op_type not in _CONTROL_FLOW:
            continue
        for a in n.attribute:
            for sub in [a.g] if a.HasField("g") else list(a.graphs):
                yield from graphs(sub)


def _odd(d: onnx.TensorShapeProto.Dimension) -> bool:
    return d.HasField("dim_value") and d.dim_value <= 0 and not d.dim_param


def clear(model: onnx.ModelProto, top_only: bool = False) -> DeclaredDims:
    """Clear every declared dim below 1 of ``model`` in place (the graph's inputs, outputs and
    value_info, subgraphs too unless ``top_only``); what they were."""
    return clear_subgraph_dims([model.graph] if top_only else graphs(model.graph))


def clear_subgraph_dims(bodies) -> DeclaredDims:
    """:func:`clear` on these graphs alone (the load's walk over every node found them)."""
    found = DeclaredDims()
    for g in bodies:
        for kind, vi in _infos(g):
            if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
                continue
            for axis, d in enumerate(vi.type.tensor_type.shape.dim):
                if _odd(d):
                    found.dims.setdefault(vi.name, {})[axis] = d.dim_value
                    found.kinds.setdefault(vi.name, kind)
                    d.ClearField("dim_value")
    return found


def has_odd_dims(model: onnx.ModelProto) -> bool:
    """Whether :func:`clear` would change ``model`` (without changing it)."""
    return any(_odd(d) for g in graphs(model.graph) for _, vi in _infos(g)
               if vi.type.HasField("tensor_type") for d in vi.type.tensor_type.shape.dim)


def owned(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself when it declares no such dim, else a copy for :func:`clear` to change (an
    API user's ModelProto is not the working copy)."""
    if not has_odd_dims(model):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def restore(model: onnx.ModelProto, declared: DeclaredDims) -> None:
    """Give the declarations back, in place, wherever the tensor is still declared with the same
    axis unset (a rewrite or a --fix-shapes value that set it wins)."""
    if not declared:
        return
    for g in graphs(model.graph):
        for _, vi in _infos(g):
            axes = declared.dims.get(vi.name)
            if not axes or not vi.type.HasField("tensor_type"):
                continue
            dims = vi.type.tensor_type.shape.dim
            for axis, value in axes.items():
                if axis < len(dims) and not dims[axis].HasField("dim_value") and not dims[axis].dim_param:
                    dims[axis].dim_value = value
