"""einsum-to-matmul: Einsum as MatMul / Transpose / Reshape / ReduceSum / Mul.

Why: TensorRT parsers before 8.2 have no Einsum ("No importer registered for op: Einsum"); 8.2 to
10.x reject ellipsis, diagonals (a label repeated in one operand), broadcasting between operands,
upper-case labels ("Invalid character(s) in Einsum equation"), more than two operands (8.x) and
integer types. SuperGlue / LightGlue / attention exports are full of Einsum.

How: labels are parsed into per-axis ids (ellipsis axes right-aligned, so broadcasting works);
a label repeated inside an operand is reduced to its diagonal (multiply by an identity mask, then
ReduceSum); a label no other operand and not the output needs is summed first; a size-1 axis that
broadcasts against another operand is squeezed away. Operands are then contracted pairwise,
smallest intermediate first: ``[batch..., M, K] @ [batch..., K, N]`` with MatMul's own batch
dimensions (Reshape only where several labels must merge into M, K or N), the operand order and
batch order chosen to need the fewest Transposes; a pair with nothing to contract is a
broadcasting Mul. A final Transpose, if needed, gives the output order.

Integer Einsum never goes through MatMul (TensorRT's MatMul is float-only, and casting to float
is inexact above 2^24): it is computed as a broadcasting Mul followed by ReduceSum in the input's
own integer type, which is exact. (onnxruntime's CPU ReduceSum accumulates int64 in double, so
when verifying on onnxruntime, sums beyond 2^53 differ there; TensorRT has no such limit.)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.graph import Builder, replace_tensor, tensor_dtype
from graphfix.graph.build import Skip
from graphfix.passes.base import LIMIT, NO_IMPORTER, TYPE, Context, Pass, Rule

#: Size assumed for a dynamic dim when ordering contractions (only affects the order).
_DYNAMIC_GUESS = 64


def _not_float(node: gs.Node, ctx: Context) -> bool:
    dtype = tensor_dtype(node.inputs[0]) if node.inputs else None
    return dtype is None or dtype.kind != "f"


def _equation(node: gs.Node) -> str:
    return node.attrs.get("equation", "").replace(" ", "")


def _upper(node: gs.Node, ctx: Context) -> bool:
    return any(c.isupper() for c in _equation(node))


def _diagonal(node: gs.Node, ctx: Context) -> bool:
    terms = _equation(node).partition("->")[0].split(",")
    return any(len(set(t.replace("...", ""))) != len(t.replace("...", "")) for t in terms)


def _broadcast(node: gs.Node, ctx: Context) -> bool:
    return _broadcasts(node)


def _ellipsis_or_many(node: gs.Node, ctx: Context) -> bool:
    eq = _equation(node)
    return "..." in eq or len(eq.partition("->")[0].split(",")) > 2


def _broadcasts(node: gs.Node) -> bool:
    """Does a label (or ellipsis axis) have size 1 in one operand and another size elsewhere?"""
    if any(t.shape is None for t in node.inputs):
        return True
    try:
        labels, _ = parse(node.attrs["equation"], [len(t.shape) for t in node.inputs])
    except Skip:
        return True
    sizes: dict[str, set] = {}
    for t, ls in zip(node.inputs, labels, strict=True):
        for d, label in zip(t.shape, ls, strict=True):
            sizes.setdefault(label, set()).add(d)
    return any(1 in s and len(s) > 1 for s in sizes.values())


@dataclass
class Operand:
    """A tensor with one label per axis (``dims``: static size per label, shared by all operands)."""

    tensor: gs.Tensor
    labels: list[str]
    dims: dict[str, int | None]

    def with_(self, tensor: gs.Tensor, labels: list[str]) -> Operand:
        return Operand(tensor, labels, self.dims)


def parse(equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Per-operand axis labels and output labels; ellipsis axes become ``...0``, ``...1``, right-aligned."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Skip(f"equation {equation!r} has {len(terms)} operands, the node has {len(ranks)} inputs")
    ell_rank = 0
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            ell_rank = max(ell_rank, rank - (len(term) - 3))
    ellipsis = [f"...{i}" for i in range(ell_rank)]
    operands = []
    for term, rank in zip(terms, ranks, strict=True):
        head, dots, tail = term.partition("...")
        n_ell = rank - len(head) - len(tail) if dots else 0
        labels = list(head) + (ellipsis[ell_rank - n_ell :] if dots else []) + list(tail)
        if len(labels) != rank or n_ell < 0:
            raise Skip(f"equation term {term!r} does not fit an input of rank {rank}")
        operands.append(labels)
    if arrow:
        head, dots, tail = rhs.partition("...")
        output = list(head) + (ellipsis if dots else []) + list(tail)
    else:
        counts = {c: sum(t.count(c) for t in terms) for c in lhs if c.isalpha()}
        output = ellipsis + sorted(c for c, k in counts.items() if k == 1)
    return operands, output


def rewrite(node: gs.Node, ctx: Context) -> None:
    inputs = list(node.inputs)
    if any(t.shape is None for t in inputs):
        raise Skip("an input has unknown rank (run shape inference upstream)")
    dtype = tensor_dtype(inputs[0])
    if dtype is None:
        raise Skip("input type is unknown (run shape inference upstream)")
    labels, output = parse(node.attrs["equation"], [len(t.shape) for t in inputs])
    dims = _label_dims(inputs, labels)
    b = ctx.builder
    ops = [Operand(t, list(ls), dims) for t, ls in zip(inputs, labels, strict=True)]
    ops = [_drop_broadcast_axes(b, op, output) for op in ops]
    ops = [_diagonals(b, op, dtype) for op in ops]
    while len(ops) > 1:
        i, j = _cheapest_pair(ops, output, dims)
        a, c = ops[i], ops[j]
        rest = [op for k, op in enumerate(ops) if k not in (i, j)]
        keep = set(output).union(*(op.labels for op in rest))
        a, c = _sum_private(b, a, keep | set(c.labels)), _sum_private(b, c, keep | set(a.labels))
        ops = [*rest, _contract(b, a, c, keep, output if not rest else None, dims, dtype)]
    result = _sum_private(b, ops[0], set(output))
    perm = [result.labels.index(label) for label in output]
    y = result.tensor if perm == list(range(len(perm))) else b.transpose(result.tensor, perm)
    replace_tensor(ctx.graph, node.outputs[0], y)


# ------------------------------------------------------------------ shapes
def _label_dims(inputs: list[gs.Tensor], labels: list[list[str]]) -> dict[str, int | None]:
    """Static size per label (the non-1 size where operands broadcast), None when dynamic."""
    dims: dict[str, int | None] = {}
    for t, ls in zip(inputs, labels, strict=True):
        for d, label in zip(t.shape, ls, strict=True):
            size = d if isinstance(d, (int, np.integer)) and d >= 0 else None
            prev = dims.get(label, 1)
            dims[label] = None if size is None or prev is None else max(prev, int(size))
    return dims


def _drop_broadcast_axes(b: Builder, op: Operand, output: list[str]) -> Operand:
    """A static size-1 axis whose label is larger elsewhere only broadcasts. MatMul and Mul
    broadcast output labels themselves; a label that gets summed is squeezed away here so that
    contraction sizes always agree."""
    shape = op.tensor.shape
    drop = [
        k for k, label in enumerate(op.labels)
        if shape[k] == 1 and op.dims[label] != 1 and label not in output and op.labels.count(label) == 1
    ]
    if not drop:
        return op
    return op.with_(b.squeeze(op.tensor, drop), [lab for k, lab in enumerate(op.labels) if k not in drop])


def _dim(b: Builder, op: Operand, axis: int) -> gs.Tensor | int:
    """The size of an axis: an int when static, else a 1-D int64 tensor from Shape."""
    size = op.dims[op.labels[axis]]
    if size is not None:
        return size
    return b.op("Gather", [b.shape(op.tensor), np.array([axis], np.int64)], {"axis": 0})


def _shape_tensor(b: Builder, parts: list[int | gs.Tensor]) -> gs.Tensor:
    """A Reshape target from static ints and 1-D runtime pieces (constant when all static)."""
    if all(isinstance(p, int) for p in parts):
        return b.const(np.array(parts, np.int64), hint="shape")
    pieces: list[gs.Tensor] = []
    run: list[int] = []
    for p in parts:
        if isinstance(p, int):
            run.append(p)
            continue
        if run:
            pieces.append(b.const(np.array(run, np.int64)))
            run = []
        pieces.append(p)
    if run:
        pieces.append(b.const(np.array(run, np.int64)))
    return b.concat(pieces, 0)


def _group(b: Builder, op: Operand, axes: list[int]) -> int | gs.Tensor:
    """The product of some axes' sizes (static int, or ReduceProd of Shape pieces)."""
    sizes = [op.dims[op.labels[a]] for a in axes]
    if all(s is not None for s in sizes):
        return math.prod(sizes)  # type: ignore[arg-type]
    shape = b.op("Gather", [b.shape(op.tensor), np.array(axes, np.int64)], {"axis": 0})
    return b.reduce("ReduceProd", shape, [0], keepdims=True)


# ------------------------------------------------------------ single operand
def _diagonals(b: Builder, op: Operand, dtype: np.dtype) -> Operand:
    """x[..i..i..] -> x[..i..]: multiply by an identity mask over the two axes, sum one away."""
    while True:
        repeated = next((lab for lab in op.labels if op.labels.count(lab) > 1), None)
        if repeated is None:
            return op
        p = op.labels.index(repeated)
        q = op.labels.index(repeated, p + 1)
        rank = len(op.labels)
        size = op.dims[repeated]
        if size is not None:
            shape = [1] * rank
            shape[p] = shape[q] = size
            mask: gs.Tensor = b.const(np.eye(size, dtype=dtype).reshape(shape), hint="eye")
        else:
            n = b.reshape(_dim(b, op, p), np.array([], np.int64))
            idx = b.op("Range", [np.array(0, np.int64), n, np.array(1, np.int64)])
            rows = b.unsqueeze(idx, [k for k in range(rank) if k != p])
            cols = b.unsqueeze(idx, [k for k in range(rank) if k != q])
            mask = b.cast(b.op("Equal", [rows, cols]), dtype)
        summed = b.reduce("ReduceSum", b.op("Mul", [op.tensor, mask]), [q], keepdims=False)
        op = op.with_(summed, op.labels[:q] + op.labels[q + 1 :])


def _sum_private(b: Builder, op: Operand, needed: set[str]) -> Operand:
    """Sum away labels nothing else needs (before contracting: smaller MatMuls)."""
    axes = [k for k, label in enumerate(op.labels) if label not in needed]
    if not axes:
        return op
    return op.with_(b.reduce("ReduceSum", op.tensor, axes, keepdims=False), [lab for lab in op.labels if lab in needed])


# --------------------------------------------------------------- two operands
def _cheapest_pair(ops: list[Operand], output: list[str], dims: dict[str, int | None]) -> tuple[int, int]:
    """The pair whose contraction result is smallest (keeps 3+ operand chains cheap)."""
    def result_size(i: int, j: int) -> float:
        rest = set(output).union(*(op.labels for k, op in enumerate(ops) if k not in (i, j)))
        kept = (set(ops[i].labels) | set(ops[j].labels)) & rest
        return math.prod(dims[label] or _DYNAMIC_GUESS for label in kept)

    return min(itertools.combinations(range(len(ops)), 2), key=lambda ij: result_size(*ij))


@dataclass
class _Plan:
    a: Operand
    c: Operand
    batch: list[str]
    m: list[str]
    k: list[str]
    n: list[str]
    matmul: bool = True

    def transposes(self, output: list[str] | None) -> int:
        c_order = self.batch + (self.k + self.n if self.matmul else self.n + self.k)
        count = int(self.a.labels != self.batch + self.m + self.k) + int(self.c.labels != c_order)
        if output is not None:
            count += int(self.batch + self.m + self.n != output)
        return count


def _plans(a: Operand, c: Operand, keep: set[str], output: list[str] | None, matmul: bool) -> list[_Plan]:
    order = output or []
    def rank(label: str, fallback: list[str]) -> tuple[int, int]:
        return (order.index(label), 0) if label in order else (len(order), fallback.index(label))

    plans = []
    for x, y in ((a, c), (c, a)):
        shared = [lab for lab in x.labels if lab in y.labels]
        batch = sorted((lab for lab in shared if lab in keep), key=lambda lab: rank(lab, x.labels))
        k = [lab for lab in x.labels if lab in shared and lab not in keep]
        m = sorted((lab for lab in x.labels if lab not in shared), key=lambda lab: rank(lab, x.labels))
        n = sorted((lab for lab in y.labels if lab not in shared), key=lambda lab: rank(lab, y.labels))
        plans.append(_Plan(x, y, batch, m, k, n, matmul))
        # keeping x's own batch order can save a Transpose where output order cannot
        natural = [lab for lab in x.labels if lab in batch]
        if natural != batch:
            plans.append(_Plan(x, y, natural, m, k, n, matmul))
    return plans


def _contract(b: Builder, a: Operand, c: Operand, keep: set[str], output: list[str] | None,
              dims: dict[str, int | None], dtype: np.dtype) -> Operand:
    contracted = any(lab in c.labels and lab not in keep for lab in a.labels)
    matmul = contracted and dtype.kind == "f"
    plan = min(_plans(a, c, keep, output, matmul), key=lambda p: p.transposes(output))
    return _matmul(b, plan) if matmul else _mul_reduce(b, plan)


def _arrange(b: Builder, op: Operand, labels: list[str]) -> Operand:
    if op.labels == labels:
        return op
    return op.with_(b.transpose(op.tensor, [op.labels.index(lab) for lab in labels]), labels)


def _mul_reduce(b: Builder, p: _Plan) -> Operand:
    """Broadcasting Mul of [batch, m, 1.., k] and [batch, 1.., n, k], then ReduceSum over k."""
    nb, nm, nn = len(p.batch), len(p.m), len(p.n)
    x = _arrange(b, p.a, p.batch + p.m + p.k).tensor
    y = _arrange(b, p.c, p.batch + p.n + p.k).tensor
    if nn:
        x = b.unsqueeze(x, list(range(nb + nm, nb + nm + nn)))
    if nm:
        y = b.unsqueeze(y, list(range(nb, nb + nm)))
    prod = b.op("Mul", [x, y])
    labels = p.batch + p.m + p.n
    if p.k:
        prod = b.reduce("ReduceSum", prod, list(range(len(labels), len(labels) + len(p.k))), keepdims=False)
    return p.a.with_(prod, labels)


def _matmul(b: Builder, p: _Plan) -> Operand:
    """[batch, M, K] @ [batch, K, N] with MatMul's batch dims; Reshape only to merge labels."""
    nb = len(p.batch)
    x = _arrange(b, p.a, p.batch + p.m + p.k)
    y = _arrange(b, p.c, p.batch + p.k + p.n)
    xm = _merge(b, x, nb, [len(p.m), len(p.k)])
    ym = _merge(b, y, nb, [len(p.k), len(p.n)])
    out = b.op("MatMul", [xm, ym])
    labels = p.batch + p.m + p.n
    if len(p.m) <= 1 and len(p.n) <= 1:  # [batch, M|1, N|1]: at most drop the inserted 1 axes
        inserted = ([nb] if not p.m else []) + ([nb + 1] if not p.n else [])
        return p.a.with_(b.squeeze(out, inserted) if inserted else out, labels)
    parts: list[int | gs.Tensor] = [0] * nb
    parts += [_dim(b, x, nb + i) for i in range(len(p.m))]
    parts += [_dim(b, y, nb + len(p.k) + i) for i in range(len(p.n))]
    return p.a.with_(b.reshape(out, _shape_tensor(b, parts)), labels)


def _merge(b: Builder, op: Operand, nb: int, groups: list[int]) -> gs.Tensor:
    """Reshape [batch, g1 axes..., g2 axes...] to [batch, G1, G2]; an empty group becomes a 1 axis."""
    if groups == [1, 1]:
        return op.tensor
    if 0 in groups and all(g <= 1 for g in groups):
        return b.unsqueeze(op.tensor, [nb + groups.index(0)] if groups != [0, 0] else [nb, nb + 1])
    parts: list[int | gs.Tensor] = [0] * nb
    start = nb
    for g in groups:
        parts.append(_group(b, op, list(range(start, start + g))) if g else 1)
        start += g
    return b.reshape(op.tensor, _shape_tensor(b, parts))


PASS = Pass(
    name="einsum-to-matmul",
    summary="Rewrite Einsum into MatMul/Transpose/Reshape/ReduceSum/Mul (any equation; exact for ints).",
    ops=frozenset({"Einsum"}),
    rules=(
        Rule(NO_IMPORTER, "<8.2", "no Einsum importer", error="einsum-not-supported", evidence="operator table"),
        Rule(TYPE, ">=8.2", "integer Einsum (FP32/FP16 only)", _not_float, error="einsum-unsupported-equation",
             evidence="operator table types"),
        Rule(LIMIT, ">=8.2,<10.12", "upper-case labels in the equation", _upper, error="einsum-unsupported-equation",
             evidence="importer source (lower-case only)"),
        Rule(LIMIT, ">=8.2,<10.12", "a diagonal (label repeated in one operand)", _diagonal, error="einsum-unsupported-equation",
             evidence="operator table restrictions; changelog 10.12"),
        Rule(LIMIT, ">=8.2,<10.12", "broadcasting between operands", _broadcast, error="einsum-unsupported-equation",
             evidence="operator table restrictions; changelog 10.12"),
        Rule(LIMIT, ">=8.2,<9.0", "ellipsis or more than two operands", _ellipsis_or_many, error="einsum-unsupported-equation",
             evidence="operator table restrictions 8.x"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
