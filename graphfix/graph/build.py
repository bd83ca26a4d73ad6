"""Node construction at the graph's opset, with names that point back at the node being replaced.

Reports and TensorRT logs name nodes; a rewritten Clip called ``/head/Clip`` becomes nodes named
``/head/Clip/gf.Max_0`` so users can map TensorRT layer names back to their export.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.util.misc import SynchronizedList

from graphfix.graph.importer import all_graphs
from graphfix.onnxio.validate import declared_attribute_types

TensorLike = gs.Tensor | np.ndarray | int | float | bool | Sequence[int] | Sequence[float]


#: Most terms :meth:`Builder.product` multiplies out (a Mul per term).
PRODUCT_TERMS = 64


def lengths(x: gs.Tensor, axes: Sequence[int]) -> list[int] | None:
    """The static lengths of ``axes`` of ``x`` when their product is small enough to multiply out."""
    if x.shape is None:
        return None
    try:
        dims = [x.shape[a] for a in axes]
    except IndexError:
        return None
    if not all(isinstance(d, int | np.integer) and d > 0 for d in dims) or np.prod(dims) > PRODUCT_TERMS:
        return None
    return [int(d) for d in dims]


def _described(t: gs.Variable, dtype: Any = None, shape: Sequence[int | str | None] | None = None) -> gs.Variable:
    """``t`` with the dtype/shape a caller gave for the result (as :meth:`Builder.op` sets them)."""
    if dtype is not None:
        t.dtype = dtype
    if shape is not None:
        t.shape = shape
    return t


def stored(graph: gs.Graph, name: str) -> Any:
    """What graphfix stored on ``graph`` under ``name``, or None. Not ``getattr``: a gs.Graph
    looks a missing attribute up in its function registry and logs "[E] Function: ... was not
    registered" on stdout first."""
    return graph.__dict__.get(name)


def _names(root: gs.Graph) -> set[str]:
    """Every node and tensor name of ``root`` and its bodies, collected once per graph and kept on
    it: the names builders hand out are added as they go. (Names made outside builders, such as
    replace_tensor's ``__replaced``/``/gf.Identity``, never end in ``_<n>`` as builder names do.)"""
    taken = stored(root, "gf_names")
    if taken is None:

        taken = set()
        for g in all_graphs(root):  # g.tensors() would check every name twice
            taken.update(t.name for t in (*g.inputs, *g.outputs))
            for n in g.nodes:
                taken.add(n.name)
                taken.update(t.name for t in n.inputs)
                taken.update(t.name for t in n.outputs)
        root.gf_names = taken
    return taken


def _constant(name: str, values: np.ndarray) -> gs.Constant:
    """``gs.Constant(name, values)``, the same object, without the constructor's cost: its
    ``Tensor.__setattr__`` looks ``inputs``/``outputs`` up first and catches the AttributeError,
    3.9 us a constant instead of 1.6 (fold-clip makes 25,000 on bench/scale.py). The attributes
    are the constructor's (tests/graph/test_build.py compares them with a constructed one)."""
    c = object.__new__(gs.Constant)
    d = c.__dict__
    d["name"] = name
    d["inputs"] = SynchronizedList(c, field_name="outputs", initial=[])
    d["outputs"] = SynchronizedList(c, field_name="inputs", initial=[])
    d["_values"], d["data_location"], d["_export_dtype"] = values, None, None
    return c


class Builder:
    """Adds nodes to ``graph``; every helper returns the new output tensor(s)."""

    def __init__(self, graph: gs.Graph, prefix: str = "gf", _shared: dict | None = None) -> None:
        self.graph = graph
        self.opset: int = graph.opset
        self.prefix = prefix
        self._shared = _shared if _shared is not None else {"n": 0, "taken": None}

    def scoped(self, prefix: str) -> Builder:
        """A builder whose names start with ``prefix`` (usually the replaced node's name)."""
        return Builder(self.graph, prefix, self._shared)

    def name(self, hint: str) -> str:
        shared = self._shared
        if shared["taken"] is None:
            shared["taken"] = _names(shared.get("root", self.graph))
        while True:
            candidate = f"{self.prefix}/gf.{hint}_{shared['n']}"
            shared["n"] += 1
            if candidate not in shared["taken"]:
                shared["taken"].add(candidate)
                return candidate

    # ------------------------------------------------------------------ tensors
    def const(self, value: Any, dtype: Any = None, hint: str = "const") -> gs.Constant:
        """A new initializer. Of numbers only: a pass deriving a constant's type from a STRING
        tensor (a Clip on a string input, which onnxruntime would refuse) leaves the node as it
        is, with a finding; a string initializer could not be exported."""
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype.kind in "OSU":

            raise Skip("the rewrite would need a constant of string type; graphfix rewrites numeric tensors only")
        if arr.dtype == np.float64 and dtype is None and not isinstance(value, (np.ndarray, np.generic)):
            arr = arr.astype(np.float32)  # Python floats mean float32; numpy arrays keep their type
        return _constant(self.name(hint), arr if arr.flags.c_contiguous else arr.copy(order="C"))

    def tensor(self, value: TensorLike, dtype: Any = None) -> gs.Tensor:
        return value if isinstance(value, gs.Tensor) else self.const(value, dtype)

    def op(
        self,
        op_type: str,
        inputs: Sequence[TensorLike | None],
        attrs: dict[str, Any] | None = None,
        *,
        dtype: Any = None,
        shape: Sequence[int | str | None] | None = None,
        outputs: int = 1,
        domain: str | None = None,
    ) -> gs.Variable | list[gs.Variable]:
        """One node; ``None`` inputs become empty optional inputs."""
        ins = [gs.Variable.empty() if i is None else self.tensor(i) for i in inputs]
        outs = [gs.Variable(self.name(f"{op_type}_out"), dtype=dtype, shape=shape) for _ in range(outputs)]
        problem = attribute_problem(op_type, domain, attrs, self.opset) if attrs else None
        if problem:
            raise Skip(problem)
        node = gs.Node(op_type, name=self.name(op_type), attrs=dict(attrs or {}), inputs=ins, outputs=outs)
        if domain:
            node.domain = domain
        self.graph.nodes.append(node)
        return outs[0] if outputs == 1 else outs

    # ------------------------------------------------------- opset-aware helpers
    def max(self, a: TensorLike, b: TensorLike, integer: bool = True, **kw: Any) -> gs.Variable:
        """max(a, b) elementwise: Max, or for ``integer`` inputs before opset 12 (Max-8 takes
        floats only: "has unsupported type: tensor(int64)") Where(Less(a, b), b, a)."""
        if integer and self.opset < 12:
            a, b = self.tensor(a), self.tensor(b)
            return self.op("Where", [self.op("Less", [a, b], dtype=np.bool_), b, a], **kw)
        return self.op("Max", [a, b], **kw)

    def _axes(self, axes: Sequence[int]) -> gs.Constant:
        return self.const(np.asarray(list(axes), dtype=np.int64), hint="axes")

    def reduce(self, op_type: str, x: gs.Tensor, axes: Sequence[int], keepdims: bool = True, **kw: Any) -> gs.Variable:
        """ReduceX: axes moved from attribute to input in opset 13 (ReduceSum) / 18 (the rest).
        Parsers before 10.0 ignore the opset-18 axes input (they reduce over every axis), so from
        opset 18 ReduceMax/ReduceMin are written as :meth:`extreme` (TopK), which every release reads."""
        if op_type in ("ReduceMax", "ReduceMin") and self.opset >= 18 and axes:
            return self.extreme(x, axes, keepdims, largest=op_type == "ReduceMax", **kw)
        if op_type == "ReduceProd" and self.opset >= 18 and axes and lengths(x, axes) is not None:
            return self.product(x, axes, keepdims, **kw)
        as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        attrs = {"keepdims": int(keepdims)}
        if as_input:
            return self.op(op_type, [x, self._axes(axes)], attrs, **kw)
        return self.op(op_type, [x], {**attrs, "axes": list(axes)}, **kw)

    def extreme(self, x: gs.Tensor, axes: Sequence[int], keepdims: bool = True, largest: bool = True, **kw: Any) -> gs.Variable:
        """Max (or min) over ``axes`` as TopK(K=1) along each axis in turn, then Squeeze: TopK's
        K input is read by every 8.x importer, unlike an opset-18 ReduceMax's axes."""
        if not axes:
            raise ValueError("extreme() needs at least one axis")
        k = self.const(np.asarray([1], np.int64), hint="k")
        y = x
        for axis in axes:
            y = self.op("TopK", [y, k], {"axis": int(axis), "largest": int(largest), "sorted": 1}, outputs=2)[0]
        return self.squeeze(y, list(axes), **kw) if not keepdims else _described(y, **kw)

    def product(self, x: gs.Tensor, axes: Sequence[int], keepdims: bool = True, **kw: Any) -> gs.Variable:
        """Product over ``axes`` of static length (at most PRODUCT_TERMS terms in all) as a Mul of
        slices: the opset-18 ReduceProd's axes input is ignored before 10.0 and nothing else
        multiplies along an axis."""
        sizes = lengths(x, axes)
        if not axes or sizes is None:
            raise ValueError("product() needs at least one axis, all of static length")
        y = x
        for axis, n in zip(axes, sizes, strict=True):
            parts = [self.slice(y, [i], [i + 1], [axis]) for i in range(n)]
            y = parts[0]
            for part in parts[1:]:
                y = self.op("Mul", [y, part])
        return self.squeeze(y, list(axes), **kw) if not keepdims else _described(y, **kw)

    def unsqueeze(self, x: gs.Tensor, axes: Sequence[int], **kw: Any) -> gs.Variable:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self._axes(axes)], **kw)
        return self.op("Unsqueeze", [x], {"axes": list(axes)}, **kw)

    def squeeze(self, x: gs.Tensor, axes: Sequence[int], **kw: Any) -> gs.Variable:
        if self.opset >= 13:
            return self.op("Squeeze", [x, self._axes(axes)], **kw)
        return self.op("Squeeze", [x], {"axes": list(axes)}, **kw)

    def slice(
        self,
        x: gs.Tensor,
        starts: TensorLike,
        ends: TensorLike,
        axes: Sequence[int] | None = None,
        steps: TensorLike | None = None,
        **kw: Any,
    ) -> gs.Variable:
        """Slice with input-form starts/ends (opset >= 10); static attribute form below 10."""
        if self.opset < 10:
            attrs: dict[str, Any] = {"starts": list(np.atleast_1d(starts)), "ends": list(np.atleast_1d(ends))}
            if axes is not None:
                attrs["axes"] = list(axes)
            return self.op("Slice", [x], attrs, **kw)
        ins: list[Any] = [x, self.tensor(starts, np.int64), self.tensor(ends, np.int64)]
        if axes is not None or steps is not None:
            ins.append(self._axes(axes) if axes is not None else None)
        if steps is not None:
            ins.append(self.tensor(steps, np.int64))
        return self.op("Slice", ins, **kw)

    def cast(self, x: gs.Tensor, to: Any, **kw: Any) -> gs.Variable:
        from onnx import helper

        np_to = np.dtype(to)
        return self.op("Cast", [x], {"to": helper.np_dtype_to_tensor_dtype(np_to)}, dtype=np_to, **kw)

    def shape(self, x: gs.Tensor) -> gs.Variable:
        """Shape(x), built once per tensor, graph and builder family (dynamic reshapes ask
        repeatedly). Per graph: a family spans a pass's run over every body, and two If branches
        reading the same outer tensor each need their own Shape node."""
        cache = self._shared.setdefault("shapes", {})
        key = (id(self.graph), id(x))
        if key not in cache:
            cache[key] = (x, self.graph, self.op("Shape", [x], dtype=np.int64))
        return cache[key][2]

    def concat(self, xs: Sequence[TensorLike], axis: int, **kw: Any) -> gs.Variable:
        return self.op("Concat", list(xs), {"axis": axis}, **kw)

    def reshape(self, x: gs.Tensor, shape: TensorLike, **kw: Any) -> gs.Variable:
        return self.op("Reshape", [x, self.tensor(shape, np.int64)], **kw)

    def transpose(self, x: gs.Tensor, perm: Sequence[int], **kw: Any) -> gs.Variable:
        return self.op("Transpose", [x], {"perm": list(perm)}, **kw)


def attribute_problem(op_type: str, domain: str | None, attrs: dict[str, Any], opset: int) -> str | None:
    """An attribute of a new ONNX-domain node whose value is not of the type the op declares: a
    pass copying a node's attributes onto another op (contrib-matmul-lower: FusedConv's pads onto a
    Conv) would write what onnx's checker and onnxruntime refuse (``pads`` -1.0, a float, found by the
    fuzz). Values onnx cannot type (an empty list, tensors, graphs) are the exporter's business."""
    if domain not in (None, "", "ai.onnx"):
        return None
    declared = declared_attribute_types(op_type, opset)
    for name, value in attrs.items():
        want = declared.get(name)
        if want is None or not isinstance(value, int | float | str | bytes | list | tuple | np.generic):
            continue
        try:
            have = onnx.helper.make_attribute(name, value).type
        except (ValueError, TypeError):
            continue
        if have != want:
            return (f"{op_type} attribute {name} would be {onnx.AttributeProto.AttributeType.Name(have)} "
                    f"{value!r:.40} (the op takes {onnx.AttributeProto.AttributeType.Name(want)})")
    return None


class Skip(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by a rewrite to leave a matched node as it is, with the reason as a finding."""
