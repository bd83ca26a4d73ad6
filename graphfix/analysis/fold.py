"""Compute-at-rewrite-time values of tensors: initializers, Constant nodes, and foldable subgraphs.

TensorRT's "must be an initializer" checks (Clip min/max before 8.2, Pad pads, CumSum axis, ...)
fail on values that are computed in the graph even when they are constant. Passes ask the Folder
for such values; it evaluates ancestors once each (memoised, so linear over a pass) with the ONNX
reference implementation, and treats Shape of statically known dims as constant.
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx.reference import ReferenceEvaluator
from onnx_graphsurgeon.ir.tensor import LazyValues

from graphfix.graph.node_export import export_node
from graphfix.graph.rewire import static_shape

#: Refuse to fold values bigger than this many elements (folding must not blow up the model).
MAX_FOLD_ELEMENTS = 1 << 20
_NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
_MISSING = object()


class Folder:
    """Memoised constant evaluation over one graph (create one per pass run)."""

    def __init__(self, graph: gs.Graph, max_elements: int = MAX_FOLD_ELEMENTS) -> None:
        self.opset: int = graph.opset
        self.max_elements = max_elements
        self._memo: dict[int, np.ndarray | None] = {}

    def value(self, tensor: gs.Tensor | None) -> np.ndarray | None:
        """The tensor's value if it is known without running the model, else None."""
        if tensor is None:
            return None
        if isinstance(tensor, gs.Constant):
            shape = tensor.shape or ()
            if int(np.prod(shape, dtype=np.int64)) > self.max_elements:
                return None  # weights: never loaded (they may be gigabytes of external data)
            return np.asarray(tensor.values)
        memo = self._memo
        key = id(tensor)
        cached = memo.get(key, _MISSING)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]
        # Iterative post-order walk: deep shape chains must not hit Python's recursion limit.
        # Each tensor's inputs are looked up once (``expanded``): when it is back on top of the
        # stack, everything pushed above it has been computed (re-listing them was a third of
        # fold-clip's folding on bench/scale.py: 75,000 ``_deps`` calls for 25,000 bounds).
        stack: list[gs.Tensor] = [tensor]
        expanded: set[int] = set()
        while stack:
            t = stack[-1]
            k = id(t)
            if k in memo:
                stack.pop()
                continue
            producer = t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None  # _producer, inlined
            if k not in expanded:
                expanded.add(k)
                pending = [i for i in _deps(producer) if id(i) not in memo and not isinstance(i, gs.Constant)]
                if pending:
                    stack.extend(pending)
                    continue
            stack.pop()
            memo[k] = self._compute(t, producer)
        return memo[key]

    def is_constant(self, tensor: gs.Tensor | None) -> bool:
        return self.value(tensor) is not None

    # ---------------------------------------------------------------- internals
    @staticmethod
    def _producer(t: gs.Tensor) -> gs.Node | None:
        return t.inputs[0] if isinstance(t, gs.Variable) and t.inputs else None

    def _compute(self, t: gs.Tensor, node: gs.Node | None) -> np.ndarray | None:
        """The value of ``t``, produced by ``node``, whose inputs' values are in the memo."""
        if node is None or node.op in _NONDETERMINISTIC or (node.domain or "") not in ("", "ai.onnx"):
            return None
        if node.op == "Constant":
            return _constant_node_value(node)
        if node.op in ("Shape", "Size"):
            return _static_shape_value(node)
        if _has_body(node):
            return None
        if node.op in ("Gather", "Slice"):
            picked = self._static_dims_of_shape(node, t)
            if picked is not None:
                return picked
        values = []
        for i in node.inputs:
            if not i.name:
                values.append(None)
                continue
            v = np.asarray(i.values) if isinstance(i, gs.Constant) else self._memo.get(id(i))
            if v is None or v.size > self.max_elements:
                return None
            values.append(v)
        try:
            outs = _evaluate(node, values, self.opset)
        except Exception:  # noqa: BLE001 - unevaluable means "not constant", never an error
            return None
        for out_tensor, out_value in zip(node.outputs, outs, strict=False):
            if out_tensor is not t:
                self._memo.setdefault(id(out_tensor), _bounded(out_value, self.max_elements))
        return _bounded(outs[node.outputs.index(t)], self.max_elements)


    def _static_dims_of_shape(self, node: gs.Node, t: gs.Tensor) -> np.ndarray | None:
        """Gather/Slice of Shape(x) picking only static dims of an otherwise dynamic x (``x.shape[1]``)."""
        source = self._producer(node.inputs[0])
        if source is None or source.op != "Shape" or self._memo.get(id(node.inputs[0])) is not None:
            return None
        shape = source.inputs[0].shape
        if shape is None:
            return None
        window = list(shape)[source.attrs.get("start", 0) : source.attrs.get("end", None)]
        partial = np.asarray([d if isinstance(d, (int, np.integer)) and d >= 0 else -1 for d in window], np.int64)
        values: list[np.ndarray | None] = [partial]
        for i in node.inputs[1:]:
            v = np.asarray(i.values) if isinstance(i, gs.Constant) else self._memo.get(id(i)) if i.name else None
            if i.name and v is None:
                return None
            values.append(v)
        try:
            out = _evaluate(node, values, self.opset)[0]
        except Exception:  # noqa: BLE001 - unevaluable means "not constant"
            return None
        return None if np.any(out < 0) else out  # -1 marks a dynamic dim


def _deps(node: gs.Node | None) -> list[gs.Tensor]:
    """The inputs whose values computing ``node``'s outputs needs (none for a node not folded)."""
    if node is None or node.op in _LEAVES or node.op in _NONDETERMINISTIC or _has_body(node):
        return []
    return [i for i in node.inputs if i.name]


_LEAVES = frozenset({"Shape", "Size", "Constant"})  # computed without their inputs' values


def _has_body(node: gs.Node) -> bool:
    """An If/Loop/Scan body among the attributes (such nodes are never folded)."""
    return any(isinstance(v, gs.Graph) for v in node.attrs.values())


def _bounded(v: np.ndarray | None, limit: int) -> np.ndarray | None:
    if v is None:
        return None
    v = np.asarray(v)
    return v if v.size <= limit else None


def _constant_node_value(node: gs.Node) -> np.ndarray | None:
    attrs = node.attrs
    if "value" in attrs:
        return np.asarray(_loaded(attrs["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    return None


#: Element types whose raw_data onnx's ``to_array`` reads as it is (no unpacking, no ml_dtypes).
_PLAIN_RAW = {getattr(onnx.TensorProto, n): np.dtype(d) for n, d in (
    ("FLOAT", np.float32), ("DOUBLE", np.float64), ("FLOAT16", np.float16), ("INT8", np.int8), ("INT16", np.int16),
    ("INT32", np.int32), ("INT64", np.int64), ("UINT8", np.uint8), ("UINT16", np.uint16), ("UINT32", np.uint32),
    ("UINT64", np.uint64), ("BOOL", np.bool_))}


def _loaded(c: gs.Constant) -> np.ndarray:
    """``c.values``, loaded as onnx-graphsurgeon loads it (``np.array(numpy_helper.to_array(t))``,
    kept on the Constant), read straight from raw_data for plain little-endian types: the general
    path took 8 us a tensor, most of fold-clip's time on exports with a Constant->Cast per Clip."""
    lazy = c.__dict__.get("_values")
    if isinstance(lazy, LazyValues) and sys.byteorder == "little":
        t = lazy.tensor
        dtype = _PLAIN_RAW.get(t.data_type)
        if dtype is not None and t.HasField("raw_data") and not t.HasField("segment") \
                and t.data_location != onnx.TensorProto.EXTERNAL:
            values = np.frombuffer(t.raw_data, dtype=dtype).reshape(t.dims).copy()
            c.__dict__["_values"] = values  # what the ``values`` setter does, without Tensor.__setattr__
            return values
    return c.values


def _static_shape_value(node: gs.Node) -> np.ndarray | None:
    shape = static_shape(node.inputs[0])
    if shape is None:
        if node.op == "Shape":
            return _partial_shape_value(node)
        return _rank_of_shape(node)
    if node.op == "Size":
        return np.asarray(int(np.prod(shape)), dtype=np.int64)
    start, end = node.attrs.get("start", 0), node.attrs.get("end", None)
    return np.asarray(shape[start:end], dtype=np.int64)


def _rank_of_shape(size: gs.Node) -> np.ndarray | None:
    """Size(Shape(x)) is x's rank (of Shape's start/end window), known when x's dims are not
    (TorchScript's ``input.dim()``), even where nothing typed Shape's own output."""
    shape_of = size.inputs[0]
    source = shape_of.inputs[0] if isinstance(shape_of, gs.Variable) and shape_of.inputs else None
    if source is None or source.op != "Shape" or source.inputs[0].shape is None:
        return None
    rank = len(source.inputs[0].shape)
    window = range(rank)[source.attrs.get("start", 0) : source.attrs.get("end", rank)]  # ONNX clamps as Python slices
    return np.asarray(len(window), dtype=np.int64)


def _partial_shape_value(node: gs.Node) -> np.ndarray | None:
    """Shape(x)[start:end] is constant when that window of x's dims is static."""
    shape = node.inputs[0].shape
    if shape is None:
        return None
    window = list(shape)[node.attrs.get("start", 0) : node.attrs.get("end", None)]
    if all(isinstance(d, (int, np.integer)) and d >= 0 for d in window):
        return np.asarray(window, dtype=np.int64)
    return None


def _evaluate(node: gs.Node, values: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    if node.op == "Identity":
        return [values[0]]
    if node.op == "Cast" and "saturate" not in node.attrs:
        try:  # what exports fold most (Constant -> Cast bounds); numpy's cast is ONNX's for these types
            to = onnx.helper.tensor_dtype_to_np_dtype(node.attrs["to"])
        except (KeyError, ValueError, TypeError):
            to = None
        if to is not None and to.kind in "biuf" and values[0].dtype.kind in "biuf":
            return [values[0].astype(to)]
    in_names = tuple(f"in{k}" if v is not None else "" for k, v in enumerate(values))
    evaluator = _evaluator(export_node(node), in_names, len(node.outputs), opset)
    feeds = {n: v for n, v in zip(in_names, values, strict=True) if n}
    return [np.asarray(o) for o in evaluator.run(None, feeds)]


def _evaluator(proto: onnx.NodeProto, in_names: tuple[str, ...], n_out: int, opset: int) -> ReferenceEvaluator:
    """One ReferenceEvaluator per distinct (op, attributes, arity, opset): exports repeat the same
    Cast/Unsqueeze/Gather nodes thousands of times, and building an evaluator dominates folding."""
    del proto.input[:], proto.output[:]
    proto.name = ""
    proto.input.extend(in_names)
    proto.output.extend(f"out{k}" for k in range(n_out))
    key = (proto.SerializeToString(deterministic=True), opset)
    cached = _EVALUATORS.get(key)
    if cached is None:
        graph = onnx.helper.make_graph(
            [proto], "fold",
            [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in in_names if n],
            [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in proto.output],
        )
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        cached = _EVALUATORS[key] = ReferenceEvaluator(model)
        if len(_EVALUATORS) > 4096:
            _EVALUATORS.pop(next(iter(_EVALUATORS)))
    return cached


_EVALUATORS: dict[tuple[bytes, int], ReferenceEvaluator] = {}
