"""Where a tensor's *values* come from: constants, shapes, integer graph inputs, or data.

TensorRT computes shape tensors (Reshape targets, Range bounds, Slice starts, ...) on the host
from shapes and constants; a value that depends on tensor data, and especially on a TopK layer
(which ArgMax/ArgMin import as), cannot be one ("ITopKLayer cannot be used to compute a shape
tensor"). This walk answers that once per tensor (memoised, iterative: linear in the graph) and
keeps the path of nodes back to the offending one for the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_graphsurgeon as gs

from graphfix.analysis.fold import Folder
from graphfix.graph.rewire import tensor_dtype

#: Producers that can never feed a shape tensor, with the TensorRT layer the error names.
DATA_DEPENDENT_LAYERS = {"TopK": "ITopKLayer", "ArgMax": "ITopKLayer", "ArgMin": "ITopKLayer", "NonZero": "INonZeroLayer"}
#: Ops TensorRT can evaluate on shape tensors (elementwise but Pow, gather/concat/shuffle/slice, reduce).
SHAPE_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Cast", "Gather", "Squeeze", "Unsqueeze", "Concat", "Reshape", "Slice",
    "Identity", "Max", "Min", "Neg", "Abs", "Equal", "Less", "Greater", "Where", "Mod", "ReduceProd",
    "ReduceSum", "ReduceMin", "ReduceMax", "Expand", "Range", "ConstantOfShape", "Flatten", "Transpose",
})

#: Inputs TensorRT reads as shape tensors, per op (computed on the host from shapes and constants).
SHAPE_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Resize": (2, 3), "Upsample": (1,),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "Pad": (1,), "TopK": (1,), "OneHot": (1,),
}

CONST, SHAPE, INPUT, DATA = "const", "shape", "input", "data"


@dataclass
class Origin:
    kind: str  # CONST | SHAPE | INPUT (an integer graph input: a TensorRT shape input) | DATA
    path: list[gs.Node] = field(default_factory=list)  # DATA: offending node first, down to the value

    def describe(self) -> str:
        return " -> ".join(f"{n.op} '{n.name}'" for n in self.path) or "the values of a float graph input"

    @property
    def layer(self) -> str | None:
        """The TensorRT layer the parser error will name, when the origin is a TopK-like node."""
        return DATA_DEPENDENT_LAYERS.get(self.path[0].op) if self.path else None


class ValueOrigins:
    def __init__(self, folder: Folder) -> None:
        self.folder = folder
        self._memo: dict[int, Origin] = {}

    def of(self, tensor: gs.Tensor) -> Origin:
        memo = self._memo
        stack = [tensor]
        while stack:
            cur = stack[-1]
            if id(cur) in memo:
                stack.pop()
                continue
            producer = cur.inputs[0] if isinstance(cur, gs.Variable) and cur.inputs else None
            if self.folder.value(cur) is not None:
                memo[id(cur)] = Origin(CONST)
            elif producer is None:
                dtype = tensor_dtype(cur)  # integer graph inputs can be shape inputs; float ones are data
                memo[id(cur)] = Origin(INPUT) if dtype is not None and dtype.kind in "iu" else Origin(DATA)
            elif producer.op in ("Shape", "Size"):
                memo[id(cur)] = Origin(SHAPE)
            elif producer.op in DATA_DEPENDENT_LAYERS:
                memo[id(cur)] = Origin(DATA, [producer])
            else:
                pending = [i for i in producer.inputs if i.name and id(i) not in memo]
                if pending:
                    stack.extend(pending)
                    continue
                memo[id(cur)] = self._combine(producer, [memo[id(i)] for i in producer.inputs if i.name])
            stack.pop()
        return memo[id(tensor)]

    @staticmethod
    def _combine(producer: gs.Node, inputs: list[Origin]) -> Origin:
        data = next((o for o in inputs if o.kind == DATA), None)
        if data is not None:
            return Origin(DATA, [*data.path, producer])
        if any(o.kind == INPUT for o in inputs):
            # a non-shape layer (MatMul, Softmax, ...) over input values computes data
            return Origin(DATA, [producer]) if producer.op not in SHAPE_OPS else Origin(INPUT)
        return Origin(SHAPE)


#: How far forward a value is followed to the shape input it may feed.
_REACH = 64


def reaches_shape_input(start: gs.Tensor, through: frozenset[str] = frozenset()) -> bool:
    """``start`` feeds a shape input (a Reshape target, Tile repeats, ...) through shape-capable
    ops (and ``through``): a short forward walk that loads no values (data tensors reach a
    Conv/MatMul within a few steps and stop there)."""
    stack, seen = [start], set()
    while stack and len(seen) < _REACH:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        for consumer in t.outputs:
            shape_inputs = SHAPE_INPUTS.get(consumer.op)  # most consumers have none: no walk over their inputs
            if shape_inputs is not None and any(inp is t and k in shape_inputs for k, inp in enumerate(consumer.inputs)):
                return True
            if consumer.op in SHAPE_OPS or consumer.op in through:
                stack.extend(consumer.outputs)
    return False
