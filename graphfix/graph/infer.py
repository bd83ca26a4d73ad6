"""Output dtypes and shapes of newly built nodes, one node at a time (ONNX's own per-node inference).

Whole-model shape inference needs an export; passes that build nodes need the dtypes of what
earlier passes built (a BOOL Gather made by a GatherND decomposition, for instance). Running
ONNX's inference function of each new node on its inputs' known types costs time linear in the
nodes built.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper

from graphfix.graph.importer import all_graphs
from graphfix.graph.node_export import export_node

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
            value = _small_constant(t)
            if value is not None:
                data[t.name] = numpy_helper.from_array(value, t.name)
        else:
            try:
                outs = onnx.shape_inference.infer_node_outputs(
                    schema, export_node(node), types, data, opset_imports=[helper.make_opsetid("", opset)]
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


def _small_constant(t: gs.Tensor) -> np.ndarray | None:
    """The value of a small initializer or of a Constant node's output (the TorchScript exporter
    gives Unsqueeze/Squeeze their axes that way), for inference that needs it; else None."""
    if isinstance(t, gs.Constant):
        value = t if t.shape is not None and int(np.prod(t.shape)) <= _DATA_LIMIT else None
    else:
        producer = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None
        value = producer.attrs.get("value") if producer is not None and producer.op == "Constant" else None
        if not isinstance(value, gs.Constant) or value.shape is None or int(np.prod(value.shape)) > _DATA_LIMIT:
            value = None
    return None if value is None else np.asarray(value.values)


#: Ops whose output has the first input's shape and type (ONNX's per-node inference also knows
#: most of them; these keep the rank when it cannot run: an input it has no type for, a failure).
_SAME_AS_INPUT = frozenset({
    "Identity", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Floor", "Ceil", "Round",
    "Sign", "Clip", "Softmax", "LogSoftmax", "HardSigmoid", "HardSwish", "Elu", "Selu", "Erf", "Reciprocal", "Not",
    "Sin", "Cos", "CumSum", "Dropout", "Slice", "ScatterElements", "ScatterND", "Scatter", "Tile", "Resize", "Upsample",
    "Pad", "Trilu", "InstanceNormalization", "BatchNormalization", "LayerNormalization",
})
#: Elementwise ops with numpy broadcasting: the output's rank is the largest input rank.
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "And", "Or", "Xor", "Equal", "Less",
                        "Greater", "LessOrEqual", "GreaterOrEqual", "Where", "PRelu", "BitShift"})
_BOOL_OUT = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not"})


def complete(graph: gs.Graph) -> int:
    """Give every tensor of ``graph`` (its bodies included) the dtype and rank that its producer
    implies where ONNX's whole-model inference gave up: after NonZero -> GatherND at opset 11 it
    leaves the rest of torchvision's postprocessing without ranks, though every rank there is
    known (only dims depend on the data), and passes that need a rank (topk-constant-k,
    scatterelements-decompose) skipped the nodes. One walk in topological order: ONNX's own
    per-node inference first, then graphfix's rules for what that cannot give (Reshape's rank from
    its shape input's length, unary ops, broadcasting). Dims are never guessed: unknown dims stay
    None. Returns how many tensors gained something."""

    gained = 0
    for g in all_graphs(graph):
        for node in g.nodes:
            outs = [o for o in node.outputs if o.name]
            if node.op in _REFINED:
                _refine(node)
            if not outs or all(o.dtype is not None and o.shape is not None for o in outs):
                continue
            before = [(o.dtype is None, o.shape is None) for o in outs]
            infer_nodes([node], graph.opset)
            _own_rules(node)
            gained += sum((d and o.dtype is not None) or (s and o.shape is not None) for (d, s), o in zip(before, outs, strict=True))
    return gained


def propagate(tensors: Iterable[gs.Tensor], opset: int) -> list[gs.Node]:
    """Type what reads ``tensors`` (their consumers, in nested bodies too, and on downstream) where
    it has no type yet, after a rewrite gave them one: an If whose condition folded is inlined, and
    the ops after it (TorchScript's next cell, whose own ``input.dim()`` test reads it) learn their
    ranks. Only nodes with an untyped output are visited, each at most once per gain, so the cost is
    the region that gains. Returns the nodes that gained something, in the order they did."""
    gained: list[gs.Node] = []
    todo = list(tensors)
    while todo:
        t = todo.pop()
        for node in list(t.outputs):
            outs = [o for o in node.outputs if o.name]
            if not outs or all(o.dtype is not None and o.shape is not None for o in outs):
                continue
            before = [(o.dtype, None if o.shape is None else len(o.shape)) for o in outs]
            infer_nodes([node], opset)
            _own_rules(node)
            if [(o.dtype, None if o.shape is None else len(o.shape)) for o in outs] != before:
                gained.append(node)
                todo.extend(outs)
    return gained


#: Ops whose static dims graphfix fills in where inference left a symbol: NonZero's first dim is
#: its input's rank (which onnx did not know when it gave NonZero a shape), and a Transpose moves it.
_REFINED = frozenset({"NonZero", "Transpose"})


def _refine(node: gs.Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    if out.shape is None or x.shape is None:
        return
    if node.op == "NonZero" and len(out.shape) == 2 and not isinstance(out.shape[0], (int, np.integer)):
        out.shape = [len(x.shape), out.shape[1]]
    elif node.op == "Transpose":
        perm = node.attrs.get("perm", list(range(len(x.shape)))[::-1])
        if len(perm) == len(out.shape) == len(x.shape):
            out.shape = [x.shape[p] if isinstance(x.shape[p], (int, np.integer)) else d for p, d in zip(perm, out.shape, strict=True)]


def _rank(t: gs.Tensor) -> int | None:
    return None if t.shape is None else len(t.shape)


def _static_length(t: gs.Tensor) -> int | None:
    """The length of a 1-D tensor with a static size (a shape input), else None."""
    if t.shape is None or len(t.shape) != 1 or not isinstance(t.shape[0], (int, np.integer)) or t.shape[0] < 0:
        return None
    return int(t.shape[0])


def _own_rules(node: gs.Node) -> None:
    """Dtype and rank (dims unknown) of ``node``'s outputs where ONNX's per-node inference left them."""
    ins = [t if t.name else None for t in node.inputs]
    x = ins[0] if ins else None
    out = node.outputs[0] if node.outputs else None
    if out is None or x is None:
        return
    rank: int | None = None
    dtype = None
    op = node.op
    if op in _SAME_AS_INPUT:
        rank, dtype = _rank(x), x.dtype
        if out.shape is None and x.shape is not None and op not in ("Slice", "Tile", "Resize", "Upsample", "Pad"):
            out.shape = list(x.shape)
    elif op in _BROADCAST:
        ranks = [_rank(t) for t in ins if t is not None]
        rank = None if None in ranks else max(ranks)  # type: ignore[type-var]
        typed = ins[1] if op == "Where" and len(ins) > 1 else x
        dtype = np.dtype(bool) if op in _BOOL_OUT else (typed.dtype if typed is not None else None)
    elif op == "Cast":
        rank = _rank(x)
    elif op in ("Reshape", "Expand", "ConstantOfShape") and (len(ins) > 1 or op == "ConstantOfShape"):
        shape_input = x if op == "ConstantOfShape" else ins[1]
        length = _static_length(shape_input) if shape_input is not None else None
        if length is not None:
            rank = length if op != "Expand" else (None if _rank(x) is None else max(length, _rank(x)))  # type: ignore[type-var]
        dtype = x.dtype if op != "ConstantOfShape" else None
    elif op == "Transpose":
        perm = node.attrs.get("perm")
        rank, dtype = (len(perm) if perm is not None else _rank(x)), x.dtype
    elif op == "Flatten":
        rank, dtype = 2, x.dtype
    elif op == "Gather" and len(ins) > 1 and ins[1] is not None:
        r, q = _rank(x), _rank(ins[1])
        rank, dtype = (None if r is None or q is None else r + q - 1), x.dtype
    elif op == "GatherElements" and len(ins) > 1 and ins[1] is not None:
        rank, dtype = _rank(ins[1]), x.dtype
    elif op == "GatherND" and len(ins) > 1 and ins[1] is not None:
        idx = ins[1]
        last = idx.shape[-1] if idx.shape else None
        r, q, b = _rank(x), _rank(idx), int(node.attrs.get("batch_dims", 0))
        if r is not None and q is not None and isinstance(last, (int, np.integer)):
            rank = q - 1 + r - int(last) - b
        dtype = x.dtype
    elif op in ("TopK",):
        rank, dtype = _rank(x), x.dtype
        if len(node.outputs) > 1 and node.outputs[1].name:
            _set(node.outputs[1], rank, np.dtype(np.int64))
    elif op == "Concat":
        ranks = [_rank(t) for t in ins if t is not None and _rank(t) is not None]
        rank = ranks[0] if ranks else None
        dtype = next((t.dtype for t in ins if t is not None and t.dtype is not None), None)
    elif op in ("Squeeze", "Unsqueeze"):
        axes = node.attrs.get("axes")
        value = _small_constant(ins[1]) if axes is None and len(ins) > 1 and ins[1] is not None else None
        if value is not None:
            axes = value.reshape(-1).tolist()
        if axes is not None and _rank(x) is not None:
            rank = _rank(x) - len(axes) if op == "Squeeze" else _rank(x) + len(axes)  # type: ignore[operator]
        dtype = x.dtype
    elif op.startswith("Reduce") or op in ("ArgMax", "ArgMin"):
        keep = int(node.attrs.get("keepdims", 1))
        axes = node.attrs.get("axes", [node.attrs["axis"]] if "axis" in node.attrs else None)
        if axes is None and len(ins) > 1 and isinstance(ins[1], gs.Constant):
            axes = np.asarray(ins[1].values).reshape(-1).tolist()
        r = _rank(x)
        if r is not None:
            rank = r if keep else (r - len(axes) if axes is not None else (0 if op.startswith("Reduce") else r - 1))
        dtype = np.dtype(np.int64) if op.startswith("Arg") else x.dtype
    elif op == "Range":
        rank, dtype = 1, x.dtype
    elif op == "NonZero":
        rank, dtype = 2, np.dtype(np.int64)
    _set(out, rank, dtype)


def _set(t: gs.Tensor, rank: int | None, dtype) -> None:
    """Fill what ``t`` lacks: a dtype, and a shape of ``rank`` unknown dims."""
    if t.dtype is None and dtype is not None:
        with contextlib.suppress(TypeError):  # a type numpy has no name for (elem_type 0): left unknown
            t.dtype = np.dtype(dtype)
    if t.shape is None and rank is not None and rank >= 0:
        t.shape = [None] * rank
