"""What the graph itself says about its inputs' dynamic dims, read before anything runs.

Producers name dims by convention, not by use: optimum's ``pixel_values [batch_size,
num_channels, height, width]`` leaves the channel count to the first Conv's weight, a 16 kHz VAD's
``input [batch, samples]`` must outlast a reflect Pad of 64 and a 256-tap Conv, and its recurrent
``state [2, ?, 128]`` names its batch apart from the input's although the LSTM needs them equal.
Role sizes (224, 16, ...) cannot run such models. So each plain symbol is followed forward along the
data path, through ops that keep its dim (elementwise ops, Cast, normalisations, Transpose,
Unsqueeze, Pad, Gather on another axis, ...), to where an op fixes or bounds it:

- a Conv's input channels are its weight's ``W.shape[1] * group`` (a ConvTranspose's ``W.shape[0]``),
  a BatchNormalization's its scale's length, a MatMul's contracted dim its constant weight's rows;
  a broadcast against a constant whose dim there is above 1 is that size (a ``[1, 3, 1, 1]`` mean);
- a reflect Pad needs the dim above its pad; a Conv or pool without padding needs it at least as
  long as its dilated kernel; an STFT at least its frame (through the Pads before them);
- two symbols that meet in one broadcast, in a Concat's other axes, or as an LSTM/GRU/RNN's
  ``X`` batch and its ``initial_h`` batch must be equal;
- a symbol that reaches a Conv's spatial axes is spatial (its size must suit strides).

The walk enters If/Loop bodies (a body reads outer tensors by name), and follows a dim wherever
onnx's inference (with data propagation) carries its name. What it cannot see, a run's error may:
:func:`too_short` reads onnxruntime's "pre-pad (64) exceeds maximum allowed (15)" and its kernel
and STFT refusals. Nothing here is assumed true: the search still runs the model at what this
suggests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

#: Ops whose first output has their first input's shape.
_SAME_SHAPE = frozenset([
    "Identity", "Cast", "CastLike", "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
    "Erf", "Exp", "Log", "Abs", "Neg", "Sqrt", "Reciprocal", "Clip", "Dropout", "Softmax", "LogSoftmax",
    "Elu", "Selu", "Celu", "Gelu", "Mish", "Softplus", "Softsign", "Floor", "Ceil", "Round", "Sign",
    "Not", "IsNaN", "IsInf", "BatchNormalization", "InstanceNormalization", "LayerNormalization",
    "GroupNormalization", "LpNormalization", "MeanVarianceNormalization", "CumSum", "QuantizeLinear",
    "DequantizeLinear", "Trilu", "Shrink", "ThresholdedRelu", "Sin", "Cos", "Tan", "Asin", "Acos",
    "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Swish", "SimplifiedLayerNormalization",
    "RMSNormalization",
])
#: Ops that broadcast their inputs together (numpy rules).
_BROADCAST = frozenset([
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "BitShift", "Mod", "PRelu", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor",
])
_POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
_RECURRENT = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}  # the initial-state inputs
#: Ops whose outputs the walk never enters by a dim name: they end a dim's way (its size is read there).
_STOPS = frozenset({"Conv", "ConvTranspose", "STFT", *_POOLS, *_RECURRENT, "Shape", "Size"})


@dataclass
class DimFacts:
    """Per input symbol (a plain dim name, or ``_unnamed_<input>_<axis>``):

    ``sizes``: the size an op fixes it to, with why (``num_channels``: 3 from ``/Conv``'s weight);
    ``minimum``: the least size the ops it reaches accept, with why; ``spatial``: the number of
    spatial axes of the Conv/pool it reaches (2: an image's height or width); ``equal``: pairs of
    symbols an op needs equal, with why; ``reaches``: node name -> the symbols whose dims reach
    its inputs (a failing node's error is blamed on them)."""

    sizes: dict[str, tuple[int, str]] = field(default_factory=dict)
    minimum: dict[str, tuple[int, str]] = field(default_factory=dict)
    spatial: dict[str, int] = field(default_factory=dict)
    equal: list[tuple[str, str, str]] = field(default_factory=list)
    reaches: dict[str, set[str]] = field(default_factory=dict)


class _Graph:
    """Constants, ranks and consumers of a model, for the walk."""

    def __init__(self, model: onnx.ModelProto, stub: onnx.ModelProto | None = None) -> None:
        g = model.graph
        self.consts: dict[str, np.ndarray] = {}
        initializers = [*g.initializer, *(t for n in _all_nodes(g) for sub in _subgraphs(n) for t in sub.initializer)]
        self.shapes: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in initializers}
        for t in initializers:
            if t.data_location != onnx.TensorProto.EXTERNAL and _count(t.dims) <= 4096:
                self.consts[t.name] = numpy_helper.to_array(t)
        self.nodes = list(_all_nodes(g))
        for n in self.nodes:
            if n.op_type == "Constant" and n.output:
                value = next((a.t for a in n.attribute if a.name == "value"), None)
                if value is not None:
                    self.shapes[n.output[0]] = tuple(value.dims)
                    if _count(value.dims) <= 4096:
                        self.consts[n.output[0]] = numpy_helper.to_array(value)
        self.ranks: dict[str, int] = {k: len(v) for k, v in self.shapes.items()}
        self.static: dict[str, tuple[int | None, ...]] = {}
        self.named: dict[str, tuple[str, ...]] = {}  # the dim names onnx's inference carried to each tensor
        try:
            inferred = onnx.shape_inference.infer_shapes(stub or model, strict_mode=False, data_prop=stub is not None)
        except Exception:  # noqa: BLE001 - onnx's inference refuses some graphs: ranks from the inputs only
            inferred = model
        for vi in _all_value_infos(inferred.graph):
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is not None and tt.HasField("shape"):
                self.ranks.setdefault(vi.name, len(tt.shape.dim))
                self.static.setdefault(vi.name, tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim))
                self.named.setdefault(vi.name, tuple(d.dim_param for d in tt.shape.dim))
        self.consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        for n in self.nodes:
            for i, name in enumerate(n.input):
                if name:
                    self.consumers.setdefault(name, []).append((n, i))

    def const(self, node: onnx.NodeProto, index: int) -> np.ndarray | None:
        return self.consts.get(node.input[index]) if len(node.input) > index and node.input[index] else None

    def dim(self, name: str, axis: int) -> int | None:
        """A static size of ``name`` at ``axis`` (from a constant or onnx's inference)."""
        if name in self.shapes:
            return self.shapes[name][axis]
        dims = self.static.get(name)
        return dims[axis] if dims is not None and 0 <= axis < len(dims) else None


def _subgraphs(node: onnx.NodeProto):
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def _all_nodes(graph: onnx.GraphProto):
    """The graph's nodes and its If/Loop/Scan bodies' (a body reads outer tensors by name: silero's
    VAD runs its whole network inside an If on the sample rate)."""
    for n in graph.node:
        yield n
        for sub in _subgraphs(n):
            yield from _all_nodes(sub)


def _all_value_infos(graph: onnx.GraphProto):
    yield from (*graph.input, *graph.value_info, *graph.output)
    for n in graph.node:
        for sub in _subgraphs(n):
            yield from _all_value_infos(sub)


def _count(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _label(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type}({node.output[0] if node.output else ''})"


def read(model: onnx.ModelProto, symbols: dict[tuple[str, int], str], max_nodes: int = 20000,
         stub: onnx.ModelProto | None = None) -> DimFacts:
    """The facts about ``symbols`` ((input name, axis) -> symbol) the graph's ops imply. ``stub``:
    the model without its weights' values and with its unnamed dims named as ``symbols`` names
    them; onnx's inference (with data propagation) on it carries a dim through what the walk does
    not follow (a dynamo ``view`` whose target is built from ``Shape``)."""
    facts = DimFacts()
    if len(model.graph.node) > max_nodes or not symbols:
        return facts
    graph = _Graph(model, stub)
    carried: dict[tuple[str, int], set[str]] = {}  # (tensor, axis) -> symbols it carries at offset 0
    for (name, axis), sym in symbols.items():
        _follow(graph, facts, carried, sym, name, axis)
    _meetings(graph, facts, carried, model)
    return facts


def _follow(graph: _Graph, facts: DimFacts, carried: dict, sym: str, name: str, axis: int) -> None:
    """Walk ``sym``'s dim forward from (``name``, ``axis``); ``offset`` is what Pads added to it."""
    todo, seen = [(name, axis, 0)], set()
    while todo:
        tensor, ax, offset = todo.pop()
        if (tensor, ax, offset) in seen:
            continue
        seen.add((tensor, ax, offset))
        if offset == 0:
            carried.setdefault((tensor, ax), set()).add(sym)
        for node, index in graph.consumers.get(tensor, []):
            facts.reaches.setdefault(_label(node), set()).add(sym)
            steps = _step(graph, facts, sym, node, index, ax, offset)
            if not steps and offset == 0 and node.op_type not in _STOPS:  # where onnx's inference carried the name
                steps = [(o, k, 0) for o in node.output if o for k, n in enumerate(graph.named.get(o, ())) if n == sym]
            todo.extend(steps)


def _at_least(facts: DimFacts, sym: str, size: int, why: str) -> None:
    if size > facts.minimum.get(sym, (1, ""))[0]:
        facts.minimum[sym] = (size, why)


def _sized(facts: DimFacts, sym: str, size: int | None, why: str) -> None:
    """A weight's word over a broadcast's (both should agree; the weight is what onnxruntime checks)."""
    if size is not None and size > 0 and (sym not in facts.sizes or "broadcasts" in facts.sizes[sym][1]):
        facts.sizes[sym] = (int(size), why)


def _step(graph: _Graph, facts: DimFacts, sym: str, node: onnx.NodeProto, index: int, ax: int, offset: int) -> list:
    """Where ``node`` sends the dim at (input ``index``, axis ``ax``): [(tensor, axis, offset)]; the
    facts it fixes on the way."""
    op, label = node.op_type, _label(node)
    out0 = node.output[0] if node.output else ""
    rank = graph.ranks.get(node.input[index])
    if rank is None or not out0:
        return []
    ax = ax + rank if ax < 0 else ax
    if op in _SAME_SHAPE and index == 0:
        if ax == 1 and op in ("BatchNormalization", "InstanceNormalization") and offset == 0:
            scale = graph.shapes.get(node.input[1]) if len(node.input) > 1 else None
            _sized(facts, sym, scale[0] if scale else None, f"{label}'s scale")
        return [(out0, ax, offset)]
    if op in _BROADCAST:
        out_rank = graph.ranks.get(out0, rank)
        out_ax = ax + out_rank - rank
        for j, other in enumerate(node.input):
            if j != index and other and other in graph.shapes and offset == 0:
                b = out_ax - (out_rank - len(graph.shapes[other]))
                if b >= 0 and graph.shapes[other][b] > 1:
                    _sized(facts, sym, graph.shapes[other][b], f"{label} broadcasts it with a constant of that size")
        return [(out0, out_ax, offset)]
    if op == "Transpose":
        perm = list(_attr(node, "perm", list(range(rank))[::-1]))
        return [(out0, perm.index(ax), offset)]
    if op in ("Unsqueeze", "Squeeze"):
        axes = graph.const(node, 1) if len(node.input) > 1 else _attr(node, "axes")
        if axes is None:
            return []
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
        if op == "Unsqueeze":
            out_rank = rank + len(axes)
            axes = sorted(a + out_rank if a < 0 else a for a in axes)
            kept = [k for k in range(out_rank) if k not in axes]
            return [(out0, kept[ax], offset)]
        axes = [a + rank if a < 0 else a for a in axes]
        return [] if ax in axes else [(out0, ax - sum(a < ax for a in axes), offset)]
    if op == "Pad" and index == 0:
        return _pad(graph, facts, sym, node, rank, ax, offset)
    if op in ("Conv", "ConvTranspose") and index == 0:
        return _conv(graph, facts, sym, node, rank, ax, offset)
    if op in _POOLS | {"GlobalAveragePool", "GlobalMaxPool"} and index == 0:
        if ax < 2:
            return [(out0, ax, offset)]
        if op in _POOLS:
            _kernel(facts, sym, node, list(_attr(node, "kernel_shape", [])), rank, ax, offset)
        facts.spatial[sym] = max(facts.spatial.get(sym, 0), rank - 2)
        return []
    if op == "Concat":
        axis = _attr(node, "axis", 0)
        return [] if ax == (axis + rank if axis < 0 else axis) else [(out0, ax, offset)]
    if op == "Split" and index == 0:
        axis = _attr(node, "axis", 0)
        return [] if ax == (axis + rank if axis < 0 else axis) else [(o, ax, offset) for o in node.output if o]
    if op == "Gather" and index == 0:
        axis = _attr(node, "axis", 0)
        axis = axis + rank if axis < 0 else axis
        indices = graph.ranks.get(node.input[1])
        if ax == axis or indices is None:
            return []
        return [(out0, ax if ax < axis else ax + indices - 1, offset)]
    if op == "Slice" and index == 0:
        axes = graph.const(node, 3)
        if axes is None:
            return []
        axes = [int(a) + rank if a < 0 else int(a) for a in axes.reshape(-1)]
        return [] if ax in axes else [(out0, ax, offset)]
    if op == "Reshape" and index == 0:
        return _reshape(graph, node, rank, ax, offset)
    if op == "MatMul" and offset == 0:
        return _matmul(graph, facts, sym, node, index, rank, ax)
    if op == "Gemm" and index == 0 and offset == 0:
        b = graph.shapes.get(node.input[1])
        if b is not None and ax == (0 if _attr(node, "transA", 0) else 1):
            _sized(facts, sym, b[1] if _attr(node, "transB", 0) else b[0], f"{label}'s weight")
        return []
    if op == "STFT" and index == 0 and ax == 1:
        frame = graph.const(node, 3)
        window = graph.shapes.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        length = int(frame.reshape(-1)[0]) if frame is not None else window[0] if window else None
        if length:
            _at_least(facts, sym, length - offset, f"{label}'s frame of {length}")
        return []
    if op in _RECURRENT and index == 0 and ax == 2 and offset == 0:
        w = graph.shapes.get(node.input[1])
        _sized(facts, sym, w[2] if w else None, f"{label}'s input weight")
    return []


def _pad(graph: _Graph, facts: DimFacts, sym: str, node: onnx.NodeProto, rank: int, ax: int, offset: int) -> list:
    pads = graph.const(node, 1) if len(node.input) > 1 else _attr(node, "pads")
    if pads is None:
        return []
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    axes = graph.const(node, 3)
    axes = list(range(rank)) if axes is None else [int(a) + rank if a < 0 else int(a) for a in axes.reshape(-1)]
    if ax not in axes:
        return [(node.output[0], ax, offset)]
    k = axes.index(ax)
    begin, end = pads[k], pads[k + len(axes)]
    mode = _attr(node, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "reflect" and max(begin, end) > 0:
        _at_least(facts, sym, max(begin, end) + 1 - offset, f"{_label(node)} reflect-pads it by {max(begin, end)}")
    elif mode == "edge" and max(begin, end) > 0:
        _at_least(facts, sym, 1 - offset, f"{_label(node)} edge-pads it")
    return [(node.output[0], ax, offset + begin + end)]


def _conv(graph: _Graph, facts: DimFacts, sym: str, node: onnx.NodeProto, rank: int, ax: int, offset: int) -> list:
    w = graph.shapes.get(node.input[1])
    if ax == 0:
        return [(node.output[0], 0, offset)]
    if ax == 1:
        if w is not None and offset == 0:
            group = int(_attr(node, "group", 1))
            size = w[1] * group if node.op_type == "Conv" else w[0]
            what = "W.shape[1] x group" if node.op_type == "Conv" else "W.shape[0]"
            _sized(facts, sym, size, f"{_label(node)}'s weight ({what})")
        return []
    facts.spatial[sym] = max(facts.spatial.get(sym, 0), rank - 2)
    if node.op_type == "Conv" and w is not None:
        _kernel(facts, sym, node, list(w[2:]), rank, ax, offset)
    return []


def _kernel(facts: DimFacts, sym: str, node: onnx.NodeProto, kernel: list, rank: int, ax: int, offset: int) -> None:
    """A Conv or pool needs its (padded) input at least as long as its dilated kernel."""
    k = ax - 2
    if k >= len(kernel):
        return
    auto = _attr(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto.startswith("SAME"):
        return
    pads = list(_attr(node, "pads", [0] * (2 * (rank - 2))))
    dilation = list(_attr(node, "dilations", [1] * (rank - 2)))[k]
    span = (int(kernel[k]) - 1) * dilation + 1
    need = span - pads[k] - pads[k + rank - 2] - offset
    if need > 1:
        _at_least(facts, sym, need, f"{_label(node)}'s kernel spans {span}")


def _reshape(graph: _Graph, node: onnx.NodeProto, rank: int, ax: int, offset: int) -> list:
    """A Reshape keeps a dim its target copies (0 at the same place, allowzero off), or the last dim
    when the target ends in -1 and every other entry is 1 or a copy (``[0, 1, -1]``)."""
    target = graph.const(node, 1)
    if target is None or _attr(node, "allowzero", 0):
        return []
    target = [int(t) for t in target.reshape(-1)]
    if ax < len(target) and target[ax] == 0:
        return [(node.output[0], ax, offset)]
    if ax == rank - 1 and target and target[-1] == -1 and all(t in (0, 1) for t in target[:-1]) \
            and all(t == 1 or k < ax for k, t in enumerate(target[:-1])):
        return [(node.output[0], len(target) - 1, offset)]
    return []


def _matmul(graph: _Graph, facts: DimFacts, sym: str, node: onnx.NodeProto, index: int, rank: int, ax: int) -> list:
    out_rank = graph.ranks.get(node.output[0])
    other = graph.shapes.get(node.input[1 - index])
    if index == 0 and ax == rank - 1:
        if other is not None and len(other) >= 2:
            _sized(facts, sym, other[-2], f"{_label(node)}'s weight")
        return []
    if index == 1 and ax == rank - 2:
        return []
    if out_rank is None or rank < 2:
        return []
    return [(node.output[0], ax + out_rank - rank, 0)]


def _meetings(graph: _Graph, facts: DimFacts, carried: dict, model: onnx.ModelProto) -> None:
    """Symbols that meet where an op needs their dims equal: aligned axes of a broadcast, a
    Concat's other axes, a recurrent op's X batch and initial-state batch."""
    for node in graph.nodes:
        groups: list[list[tuple[str, int]]] = []
        if node.op_type in _BROADCAST or node.op_type == "Concat":
            ranks = [graph.ranks.get(i) for i in node.input if i]
            if not node.input or None in ranks:
                continue
            out_rank = max(ranks)
            skip = None
            if node.op_type == "Concat":
                axis = _attr(node, "axis", 0)
                skip = axis + out_rank if axis < 0 else axis
            for a in range(out_rank):
                if a != skip:
                    groups.append([(i, a - (out_rank - r)) for i, r in zip(node.input, ranks, strict=False) if a - (out_rank - r) >= 0])
        elif node.op_type in _RECURRENT:
            batch = 0 if _attr(node, "layout", 0) else 1
            states = [node.input[k] for k in _RECURRENT[node.op_type] if len(node.input) > k and node.input[k]]
            groups.append([(node.input[0], batch), *((s, batch) for s in states)])
        for group in groups:
            syms = sorted(set().union(*(carried.get(slot, set()) for slot in group)))
            for other in syms[1:]:
                pair = (syms[0], other, f"{_label(node)} ({node.op_type}) needs them equal")
                if not any(p[:2] == pair[:2] for p in facts.equal):
                    facts.equal.append(pair)


# ---------------------------------------------------------------- sizes learned from a run's error
#: onnxruntime's errors that say a dim was too short for a node (a reflect Pad, a kernel, a frame);
#: the search raises the sizes of the symbols that reach that node and tries again.
_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")
_REFLECT = re.compile(r"(?:pre|post)-pad \((\d+)\) exceeds maximum allowed \((\d+)\)")
#: (An index "out of bounds" is not one: a KV cache's mask is related to other dims, not short.)
_TOO_SHORT = re.compile(r"Invalid input shape|window_size <= signal_size|smaller than the signal|"
                        r"Cannot use 'edge' mode to pad dimension with a value of 0|kernel.*(?:larger|exceed)", re.I)


def too_short(error: str) -> tuple[str, float] | None:
    """(node name, how many times longer its input must get) when ``error`` says a dim was too short
    for a node: a reflect Pad's "pre-pad (64) exceeds maximum allowed (15)" needs 65 where it had
    16 (x4.0625); a kernel's or an STFT frame's refusal says no size, so twice."""
    node = _NODE.search(error)
    if node is None:
        return None
    reflect = _REFLECT.search(error)
    if reflect:
        pad, allowed = int(reflect.group(1)), int(reflect.group(2))
        return node.group(2), (pad + 1) / (allowed + 1)
    if _TOO_SHORT.search(error):
        return node.group(2), 2.0
    return None
