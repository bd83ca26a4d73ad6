"""if-inline: an If whose condition is known without running the model becomes its taken branch.

Why: exporters emit If for tests that are decided at export time but computed in the graph:
the legacy torch.onnx exporter's rank tests (``Size(Shape(x)) == 4`` in index_put/scatter
lowerings) and ``Tensor.squeeze(dim)`` at opset >= 11 (``If(Shape(x)[dim] == 1, Squeeze,
Identity)``, decided once the input shape is fixed). TensorRT inlines a constant-condition If
only when the condition *is* an initializer; otherwise:

* 7.0 has no If importer at all (5.1/6.0 neither);
* 7.1-7.2 assert "If condition must be a initializer!";
* 8.0+ build an IIfConditionalLayer, whose outputs must have the same shape (8.0-10.0:
  broadcastable; 10.1+: equal rank): "IIfConditionalOutputLayer inputs must have the same
  shape" for the squeeze idiom, whose branches differ in rank; and both branches returning the
  same tensor fails "conditional subgraphs ... different output tensor names".

Rewrite: the condition is folded (``ctx.folder`` folds Shape/Size of static dims), the taken
branch is copied into the parent graph (its nested subgraphs included, outer-scope references
kept, branch-local names kept unless they clash with a parent name, nested Ifs that fold
inlined too) and its outputs become the If's outputs (an Identity where a branch returns an
outer-scope tensor or the same tensor twice). The inlined ops then type what reads those outputs,
so an If whose rank test reads them folds in the same run (TorchScript's GRU after an LSTMCell:
its ``input.dim()`` reads the LSTMCell's output, untyped while the LSTMCell's Ifs were there). A
condition that does not fold is never matched: no rewrite can choose the branch.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.fold import Folder
from graphfix.graph import Builder, is_weights, replace_tensor
from graphfix.graph.build import Skip
from graphfix.graph.edits import live_nodes, nodes_of
from graphfix.graph.importer import copy_body
from graphfix.graph.infer import infer_nodes, propagate
from graphfix.passes.base import LIMIT, MUST_BE_WEIGHTS, NO_IMPORTER, Context, Pass, Rule


def _condition(node: gs.Node, ctx: Context) -> bool | None:
    value = ctx.folder.value(node.inputs[0]) if node.inputs else None
    if value is None or np.asarray(value).size != 1:
        return None
    return bool(np.asarray(value).reshape(-1)[0])


def _folds(node: gs.Node, ctx: Context) -> bool:
    return _condition(node, ctx) is not None


def _computed(node: gs.Node, ctx: Context) -> bool:
    return _folds(node, ctx) and not is_weights(node.inputs[0])


def _shapes_differ(a: gs.Tensor, b: gs.Tensor) -> bool:
    if a.shape is None or b.shape is None:
        return False  # unknown: not provably rejected
    if len(a.shape) != len(b.shape):
        return True
    return any(isinstance(x, int) and isinstance(y, int) and x != y and 1 not in (x, y) for x, y in zip(a.shape, b.shape, strict=True))


def _branch_shapes_differ(node: gs.Node, ctx: Context) -> bool:
    then, other = node.attrs.get("then_branch"), node.attrs.get("else_branch")
    if not isinstance(then, gs.Graph) or not isinstance(other, gs.Graph) or not _computed(node, ctx):
        return False
    return any(_shapes_differ(a, b) for a, b in zip(then.outputs, other.outputs, strict=False))


def _branch_shapes_unknown(node: gs.Node, ctx: Context) -> bool:
    """A computed condition that folds, and a pair of branch outputs whose shapes are not known
    (TorchScript's ``if x.dim() == 2`` branches: an Unsqueeze on one side, the input on the
    other, typed only after the If is gone): TensorRT imports both branches as a runtime
    conditional, and whether their shapes agree is only learnt at build time."""
    then, other = node.attrs.get("then_branch"), node.attrs.get("else_branch")
    if not isinstance(then, gs.Graph) or not isinstance(other, gs.Graph) or not _computed(node, ctx):
        return False
    return any(a.shape is None or b.shape is None for a, b in zip(then.outputs, other.outputs, strict=False))


def _branches_share_outputs(node: gs.Node, ctx: Context) -> bool:
    then, other = node.attrs.get("then_branch"), node.attrs.get("else_branch")
    if not isinstance(then, gs.Graph) or not isinstance(other, gs.Graph) or not _computed(node, ctx):
        return False
    return any(a.name == b.name for a, b in zip(then.outputs, other.outputs, strict=False))


def rewrite(node: gs.Node, ctx: Context) -> None:
    taken = _condition(node, ctx)
    if taken is None:
        raise Skip("the condition is computed at runtime; no rewrite can choose the branch")
    branch = node.attrs.get("then_branch" if taken else "else_branch")
    if not isinstance(branch, gs.Graph) or len(branch.outputs) != len(node.outputs):
        raise Skip("malformed If: the taken branch is missing or its output count differs from the node's")
    pending = _undecided(ctx)
    if _inline(node, branch, ctx):
        _inline_decided(pending, ctx)


def _undecided(ctx: Context) -> list[gs.Node]:
    """The live Ifs of this graph the pass did not match when it started (their condition did not
    fold), listed once per graph before its first rewrite."""
    pending = ctx.options.get("if-inline:undecided")
    if pending is None:
        live = live_nodes(ctx.graph)
        pending = ctx.options["if-inline:undecided"] = [
            n for n in nodes_of(ctx.graph, PASS.ops) if id(n) in live and not PASS.match(n, ctx)]
    return pending


def _inline_decided(pending: list[gs.Node], ctx: Context) -> None:
    """Inline the undecided Ifs that fold now: a rank test on what an inlined If returns
    (TorchScript's next cell: ``Size(Shape(lstm_out)) == 2``, typed only once the first cell's Ifs
    are gone). Until nothing more folds; each is removed from ``pending``, so none is inlined twice."""
    progress = True
    while progress:
        progress = False
        for n in list(pending):
            if not PASS.match(n, ctx):
                continue
            pending.remove(n)
            taken = _condition(n, ctx)
            chosen = n.attrs.get("then_branch" if taken else "else_branch")
            if isinstance(chosen, gs.Graph) and len(chosen.outputs) == len(n.outputs):
                progress = _inline(n, chosen, ctx) or progress


def _inline(node: gs.Node, branch: gs.Graph, ctx: Context) -> bool:
    """Inline ``branch`` in place of ``node``; True when what follows it gained types (a fresh
    folder then sees them)."""
    outputs = list(node.outputs)  # replace_tensor moves them to the inlined nodes
    copy = copy_body(branch)
    _keep_names_unique(copy, ctx)
    ctx.graph.nodes.extend(copy.nodes)
    b = ctx.builder
    local = {id(o) for n in copy.nodes for o in n.outputs}
    became: dict[int, gs.Tensor] = {}  # branch output -> the If output it now is
    for old, new in zip(outputs, copy.outputs, strict=True):
        if id(new) in became:  # returned twice: the second If output copies the first
            new = b.op("Identity", [became[id(new)]], dtype=old.dtype, shape=old.shape)
        elif id(new) not in local:  # an initializer of the branch (or an outer tensor)
            new = b.op("Identity", [new], dtype=old.dtype, shape=old.shape)
        else:
            became[id(new)] = old
        replace_tensor(ctx.graph, old, new)
    # the branch's ops (and the Identities added above) type the If's outputs, then what reads them
    infer_nodes([*copy.nodes, *(o.inputs[0] for o in outputs if o.inputs and o.inputs[0].op == "Identity")], ctx.opset)
    gained = bool(propagate(outputs, ctx.opset))
    if gained:
        ctx.folder = Folder(ctx.graph)  # its memo holds the conditions that did not fold before
    for inner in copy.nodes:
        if inner.op == "If" and PASS.match(inner, ctx):
            taken = _condition(inner, ctx)
            inner_branch = inner.attrs.get("then_branch" if taken else "else_branch")
            if isinstance(inner_branch, gs.Graph) and len(inner_branch.outputs) == len(inner.outputs):
                gained = _inline(inner, inner_branch, ctx) or gained
    return gained


def _keep_names_unique(copy: gs.Graph, ctx: Context) -> None:
    """Branch-local names stay (the If and its branches go away) unless the parent uses them: a
    node output, or a branch initializer (optimum's merged decoder returns a [0, 2, 1, 16]
    placeholder initializer named like the If's own output, 'present.0.encoder.key': kept, the
    inlined graph held two tensors of one name and onnx refused it as not SSA)."""
    tensors = ctx.graph.tensors()
    taken = set(tensors) | {n.name for n in ctx.graph.nodes}
    b: Builder = ctx.builder
    for n in copy.nodes:
        if n.name in taken or not n.name:
            n.name = b.name(n.op)
        for o in n.outputs:
            if o.name and o.name in taken:
                o.name = b.name(o.name.rsplit("/", 1)[-1] or n.op)
    fresh: dict[int, gs.Constant] = {}  # the branch's own initializers (outer tensors are the parent's objects)
    for tensors_of in [*(n.inputs for n in copy.nodes), copy.outputs]:
        for k, t in enumerate(tensors_of):
            if isinstance(t, gs.Constant) and t.name in tensors and tensors[t.name] is not t:
                if id(t) not in fresh:
                    fresh[id(t)] = gs.Constant(b.name(t.name.rsplit("/", 1)[-1] or "const"), t.values)
                tensors_of[k] = fresh[id(t)]


PASS = Pass(
    name="if-inline",
    summary="Replace an If whose condition folds to a constant by the nodes of its taken branch.",
    ops=frozenset({"If"}),
    rules=(
        Rule(NO_IMPORTER, "<7.1", "no If importer (its condition folds: the branch can be inlined)", _folds,
             error="unsupported-op-plugin-fallback-generic", evidence="operator table; importer source (first in 7.1)"),
        Rule(MUST_BE_WEIGHTS, ">=7.1,<8.0", "If condition must be an initializer (it is computed, but folds)", _computed,
             error="if-condition-not-initializer", evidence="importer source 7.1-7.2"),
        Rule(LIMIT, ">=8.0", "If branches return different ranks/shapes and the folding condition is not an initializer",
             _branch_shapes_differ, error="if-branch-shape-mismatch",
             evidence="importer source 8.0-10.1 (only initializer conditions are inlined); NVIDIA/TensorRT#1731"),
        Rule(LIMIT, ">=8.0", "the If's condition folds but is computed, so TensorRT builds both branches as a runtime "
             "conditional, and their output shapes are not known to agree", _branch_shapes_unknown,
             error="if-branch-shape-mismatch", certain=False,
             evidence="importer source 8.5-GA builtin_op_importers.cpp and 10.1-GA onnxOpImporters.cpp, If: only a "
                      "condition that is weights selects one branch; any other builds an IIfConditional of both"),
        Rule(LIMIT, ">=8.0", "both If branches return the same tensor and the folding condition is not an initializer",
             _branches_share_outputs, error="if-branch-outputs-count-or-names",
             evidence="operator table (distinct tensor names); NVIDIA/TensorRT#2723"),
    ),
    rewrite=rewrite,
    doc=__doc__ or "",
)
