"""if-rank-unify: an If returning one tensor at two ranks, read only where the rank does not matter, returns one rank.

Why: an If whose condition is computed at runtime becomes an IIfConditional, whose output layers
want both branches' outputs of one shape: "IIfConditionalOutputLayer inputs must have the same
shape" (8.2-GA..10.1-GA, ConditionalHelpers.cpp addIfOutputLayers -> conditional->addOutput;
NVIDIA/TensorRT#1731, #2846, #4032), and 8.0-GA's select of both branches refuses "Cannot
broadcast shapes that have different ranks!" (builtin_op_importers.cpp importIf ->
isBroadcastValid). Exporters write such Ifs for ``x.squeeze(d)`` of a dynamic dim at opset >= 11
(``If(Shape(x)[d] == 1, Squeeze, Identity)``) and for TorchScript's ``if unbatched: x =
x.unsqueeze(0)`` on a flag computed at runtime, then often read the result only through a Reshape
or a Flatten. (An If whose condition folds is if-inline's.)

Pattern, per If output: one branch returns ``v`` (or an Identity of it, through any chain) and the other a
Squeeze, Unsqueeze, Reshape or Flatten of the same ``v``, the two of different rank; and every
node that reads the If's output computes the same from ``v`` as from the changed tensor, at both
ranks:

* ``Reshape`` to a shape known without running the model, with no 0 entry (or ``allowzero=1``):
  the changes keep the elements and their order, and only a 0 entry copies an input dim;
* ``Size``: the changes keep the element count;
* ``Flatten`` when both ranks split at the same place: the dims before the axis (normalised with
  each rank) multiply out to provably the same product, and so do those after it (dims the
  change keeps, dims a Squeeze drops (1 whenever it runs), static lengths).

Anything else (an Add, a Shape, an Unsqueeze, a Reshape whose shape has a 0 entry or is
computed at runtime, a graph or body output, a read from inside another body) leaves the If as it
is: the rule holds only where this rewrite applies, and any other If of different ranks stays
check's ``if-branch-rank`` finding (graphfix/check/restrictions.py), which names it, both ranks
and what would resolve it (``--set-input``, ``--fix-shapes``, re-exporting with a fixed rank).

Rewrite (exact): the changed branch returns an Identity of the tensor its Squeeze/Unsqueeze/
Reshape/Flatten read, so both branches return ``v``; the If's output is a new tensor of ``v``'s
type and shape, and each consumer is rebuilt on it (a Flatten with its axis normalised to
``v``'s rank), keeping its output's name. The change, now unread, is dropped when the model is
written. Inside If/Loop/Scan bodies too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.conditional import branch_pairs, runtime_condition
from graphfix.graph import replace_tensor
from graphfix.graph.build import Skip, stored
from graphfix.graph.edits import live_nodes
from graphfix.passes.base import LIMIT, Context, Pass, Rule

#: The rank changes of one tensor that keep its elements in order.
CHANGES = frozenset({"Squeeze", "Unsqueeze", "Reshape", "Flatten"})
_ONNX = ("", "ai.onnx")

#: A factor of one dim of the changed tensor: ("dim", i) is v's dim i, ("len", n) a static length.
Factor = tuple[str, int]
#: The changed tensor's dims, each a product of factors (None: unknown), and the dims of v that are
#: 1 whenever the change runs (those a Squeeze drops).
Layout = tuple[list[list[Factor] | None], set[int]]


@dataclass(frozen=True)
class _Output:
    """How one If output becomes one rank: ``branch`` returns an Identity of ``source``."""

    index: int
    branch: str
    source: gs.Tensor
    like: gs.Tensor  # the other branch's output: v's type and shape
    consumers: tuple[tuple[gs.Node, int | None], ...]  # each reader, with a Flatten's axis on v


def _root(t: gs.Tensor) -> gs.Tensor:
    """``t`` through any Identity nodes: the tensor whose value it is."""
    seen = 0
    while t.inputs and t.inputs[0].op == "Identity" and t.inputs[0].inputs and seen < 1000:
        t, seen = t.inputs[0].inputs[0], seen + 1
    return t


def _rank(*ts: gs.Tensor) -> int | None:
    return next((len(t.shape) for t in ts if t.shape is not None), None)


def _ints(values: object) -> list[int] | None:
    if values is None:
        return None
    arr = np.asarray(values)
    return [int(x) for x in arr.reshape(-1)] if arr.dtype.kind in "iu" else None


def _axes(change: gs.Node, ctx: Context) -> list[int] | None:
    """Squeeze/Unsqueeze axes: the attribute before opset 13, a known input after."""
    if "axes" in change.attrs:
        return _ints(change.attrs["axes"])
    if len(change.inputs) > 1 and change.inputs[1].name:
        return _ints(ctx.folder.value(change.inputs[1]))
    return None


def _layout(change: gs.Node, rank: int, ctx: Context) -> Layout | None:
    """The changed tensor's dims in terms of v's (v of rank ``rank``); None where unknown."""
    op = change.op
    if op in ("Squeeze", "Unsqueeze"):
        axes = _axes(change, ctx)
        if not axes:
            return None  # a Squeeze of every 1 dim: which ones is only known at runtime
        out_rank = rank + len(axes) if op == "Unsqueeze" else rank
        normal = {a + out_rank if a < 0 else a for a in axes}
        if len(normal) != len(axes) or not all(0 <= a < out_rank for a in normal):
            return None
        if op == "Squeeze":
            return [[("dim", i)] for i in range(rank) if i not in normal], normal
        kept = iter(range(rank))
        return [[] if p in normal else [("dim", next(kept))] for p in range(out_rank)], set()
    if op == "Flatten":
        axis = change.attrs.get("axis", 1)
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis <= rank:
            return None
        return [[("dim", i) for i in range(axis)], [("dim", i) for i in range(axis, rank)]], set()
    shape = _ints(ctx.folder.value(change.inputs[1])) if len(change.inputs) > 1 else None
    if shape is None:
        return None
    copies = not change.attrs.get("allowzero", 0)
    return [[("dim", j)] if n == 0 and copies and j < rank else [("len", n)] if n >= 0 else None
            for j, n in enumerate(shape)], set()


def _same_product(changed: list[list[Factor] | None], kept: range, v: gs.Tensor, ones: set[int]) -> bool:
    """The product of the ``changed`` dims provably equals that of v's dims ``kept``: the factors
    both share cancel, and what is left has static lengths (or is a dim a Squeeze drops: 1)
    multiplying to the same number."""
    if any(d is None for d in changed):
        return False
    left = [f for d in changed for f in d]  # type: ignore[union-attr]
    right: list[Factor] = [("dim", i) for i in kept]
    for f in list(right):
        if f in left:
            left.remove(f)
            right.remove(f)

    def length(f: Factor) -> int | None:
        kind, n = f
        if kind == "len":
            return n
        if n in ones:
            return 1
        dim = v.shape[n] if v.shape is not None and n < len(v.shape) else None
        return int(dim) if isinstance(dim, (int, np.integer)) and dim >= 0 else None

    lengths = [length(f) for f in [*left, *right]]
    if any(n is None for n in lengths):
        return False
    return int(np.prod(lengths[: len(left)], dtype=np.int64)) == int(np.prod(lengths[len(left):], dtype=np.int64))


def _flatten_axis(reader: gs.Node, layout: Layout | None, v: gs.Tensor, rank: int) -> int | None:
    """The axis on v at which Flatten gives what it gives on the changed tensor (and on v itself),
    or None where that is not proven."""
    if layout is None:
        return None
    dims, ones = layout
    axis = reader.attrs.get("axis", 1)
    on_v, on_changed = (axis + rank, axis + len(dims)) if axis < 0 else (axis, axis)
    if not (0 <= on_v <= rank and 0 <= on_changed <= len(dims)):
        return None
    if _same_product(dims[:on_changed], range(on_v), v, ones) and _same_product(dims[on_changed:], range(on_v, rank), v, ones):
        return on_v
    return None


def _readers(o: gs.Tensor, ctx: Context) -> list[gs.Node] | None:
    """The live nodes of this graph that read ``o``; None when a body output is ``o`` or a node of
    another graph (a body reading it from outside) reads it."""
    if o in ctx.graph.outputs:
        return None
    live = live_nodes(ctx.graph)
    readers = {id(n): n for n in o.outputs}
    if any(k not in live for k in readers):
        here = {id(n) for n in ctx.graph.nodes}
        if any(k not in here for k in readers):
            return None
    return [n for k, n in readers.items() if k in live]


def _invariant(reader: gs.Node, o: gs.Tensor, layout: Layout | None, v: gs.Tensor, rank: int, ctx: Context) -> tuple[bool, int | None]:
    """Whether ``reader`` computes the same from v as from the changed tensor (and a Flatten's axis on v)."""
    if (reader.domain or "") not in _ONNX or not reader.inputs or reader.inputs[0] is not o or o in reader.inputs[1:]:
        return False, None
    if reader.op == "Size":
        return True, None
    if reader.op == "Reshape":
        shape = _ints(ctx.folder.value(reader.inputs[1])) if len(reader.inputs) > 1 else None
        return shape is not None and (bool(reader.attrs.get("allowzero", 0)) or 0 not in shape), None
    if reader.op == "Flatten":
        axis = _flatten_axis(reader, layout, v, rank)
        return axis is not None, axis
    return False, None


def _unify(node: gs.Node, k: int, then: gs.Tensor, other: gs.Tensor, ctx: Context) -> _Output | None:
    """How output ``k`` becomes one rank, or None."""
    for branch, changed, like in (("then_branch", then, other), ("else_branch", other, then)):
        change = changed.inputs[0] if changed.inputs else None
        if change is None or change.op not in CHANGES or (change.domain or "") not in _ONNX or not change.inputs:
            continue
        source = change.inputs[0]
        v = _root(like)
        if _root(source) is not v:
            continue
        rank = _rank(v, like, source)
        if rank is None:
            return None
        layout = _layout(change, rank, ctx)
        changed_rank = len(layout[0]) if layout is not None else _rank(changed)
        if changed_rank is None or changed_rank == rank:
            return None
        o = node.outputs[k]
        readers = _readers(o, ctx)
        if readers is None:
            return None
        consumers = []
        for reader in readers:
            ok, axis = _invariant(reader, o, layout, v, rank, ctx)
            if not ok:
                return None
            consumers.append((reader, axis))
        return _Output(k, branch, source, like, tuple(consumers))
    return None


def _plan(node: gs.Node, ctx: Context) -> list[_Output] | None:
    """Every output whose branches differ in rank, each made one rank; None where one of them
    cannot be (or none differs, or the condition is a build-time constant)."""
    pairs = branch_pairs(node)
    if pairs is None or len(pairs) != len(node.outputs) or not runtime_condition(node, ctx.folder):
        return None
    plan = []
    for k, (then, other) in enumerate(pairs):
        unified = _unify(node, k, then, other, ctx)
        if unified is not None:
            plan.append(unified)
        elif _rank(then) is not None and _rank(other) is not None and _rank(then) != _rank(other):
            return None  # a rank difference this pass cannot remove: the If stays rejected
    return plan or None


def _unifiable(node: gs.Node, ctx: Context) -> bool:
    return _plan(node, ctx) is not None


def rewrite(node: gs.Node, ctx: Context) -> None:
    plan = _plan(node, ctx)
    if plan is None:
        raise Skip("a branch output differs in rank and is not a Squeeze/Unsqueeze/Reshape/Flatten of what the other "
                   "branch returns, or a reader of the If's output depends on its rank")
    b = ctx.builder
    outputs = {key: list(node.attrs[key].outputs) for key in ("then_branch", "else_branch")}
    added: dict[str, list[gs.Node]] = {key: [] for key in outputs}
    for u in plan:
        same = gs.Variable(b.name("Identity_out"), dtype=u.like.dtype, shape=_shape(u))
        added[u.branch].append(gs.Node("Identity", name=b.name("Identity"), inputs=[u.source], outputs=[same]))
        outputs[u.branch][u.index] = same
    for key, nodes in added.items():
        if nodes:
            node.attrs[key] = _with_outputs(node.attrs[key], nodes, outputs[key])
    for u in plan:
        old = node.outputs[u.index]
        new = gs.Variable(b.name("If_out"), dtype=old.dtype if old.dtype is not None else u.like.dtype, shape=_shape(u))
        node.outputs[u.index] = new
        for reader, axis in u.consumers:
            attrs = dict(reader.attrs) if axis is None else {**reader.attrs, "axis": axis}
            y = b.scoped(reader.name or reader.op).op(
                reader.op, [new if t is old else t for t in reader.inputs], attrs,
                dtype=reader.outputs[0].dtype, shape=reader.outputs[0].shape)
            replace_tensor(ctx.graph, reader.outputs[0], y)


def _shape(u: _Output) -> list | None:
    v = _root(u.like)
    return list(v.shape) if v.shape is not None else list(u.like.shape) if u.like.shape is not None else None


def _with_outputs(branch: gs.Graph, added: list[gs.Node], outputs: list[gs.Tensor]) -> gs.Graph:
    """A new branch with the nodes of ``branch`` and ``added``, returning ``outputs``: the If then
    holds it in place of ``branch``, which stays as it was (undoing the rewrite restores it)."""
    new = gs.Graph(nodes=[*branch.nodes, *added], inputs=list(branch.inputs), outputs=outputs, name=branch.name,
                   doc_string=branch.doc_string, opset=branch.opset, import_domains=branch.import_domains)
    declared = stored(branch, "gf_declared")
    if declared is not None:
        new.gf_declared = declared
    return new


PASS = Pass(
    name="if-rank-unify",
    summary="Make an If's branches return one rank where they differ only by a Squeeze/Unsqueeze/Reshape/Flatten its readers ignore.",
    ops=frozenset({"If"}),
    rules=(
        Rule(LIMIT, ">=8.0", "If branches return one tensor at different ranks and the condition is computed at runtime",
             _unifiable, error="if-branch-shape-mismatch",
             evidence="onnx-tensorrt 8.0-GA builtin_op_importers.cpp importIf: a tensor condition selects between both "
                      "branches after isBroadcastValid (onnx2trt_utils.cpp: 'Cannot broadcast shapes that have different "
                      "ranks!'); 8.2-GA, 8.5-GA, 8.6-GA ConditionalHelpers.cpp and 10.1-GA ConditionalHelpers.cpp "
                      "addIfOutputLayers -> IIfConditional::addOutput per output pair: 'IIfConditionalOutputLayer inputs "
                      "must have the same shape' (NVIDIA/TensorRT#1731, #2846, #4032); docs/operators.md 10.1-GA: 'the same rank'"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
