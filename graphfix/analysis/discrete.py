"""Discrete outputs: ArgMax/TopK/comparison decisions, their margins, and flips at near-ties.

A rewrite exact to float rounding can still change an index output: where two scores lie within a
rounding step of each other (a near-tie), the rewritten model may pick the other one. SuperGlue's
mutual-argmax matching after a max-shifted ReduceLogSumExp flipped 2 of 96 matches on a realistic
input, and moved ``matching_scores`` by 7.9e-3, while every float tensor agreed to 5e-7. Such a
flip is neither a wrong rewrite nor nothing. Verification finds the graph outputs that depend on a
decision, measures each decision's margin (top-1 minus top-2 for ArgMax/ArgMin, the k-th minus
the (k+1)-th for TopK, |a - b| for a comparison), and calls a flipped element a *near-tie* when
the rewrite moved the decision's inputs by at least its margin there. Near-tie flips are kept and
reported (which output, how many elements, the margins); any other flip fails verification.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_graphsurgeon as gs

#: Ops whose output is a choice among float values.
_ARG, _TOPK, _CMP = {"ArgMax", "ArgMin"}, {"TopK"}, {"Greater", "Less", "GreaterOrEqual", "LessOrEqual"}
#: A flip is a near-tie when its margin is at most this many times how far the inputs moved.
EXPLAINED_FACTOR = 2.0
#: Margins listed per decision in the report.
_SHOWN = 5


@dataclass
class Decision:
    node: str
    op: str
    #: the float inputs the choice is made on, then the K input of TopK (when computed)
    inputs: list[str]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> list[str]:
        """The float inputs compared: both operands of a comparison, the scores of ArgMax/TopK."""
        return self.inputs[:2] if self.op in _CMP else self.inputs[:1]


def find(graph: gs.Graph) -> tuple[list[Decision], dict[str, list[str]]]:
    """The decisions of the top-level graph made on float data, and per graph output the
    decisions it depends on (outputs depending on none are not listed)."""
    found: list[Decision] = []
    for n in graph.nodes:
        if n.op not in _ARG | _TOPK | _CMP or not n.inputs or not n.outputs:
            continue
        data = n.inputs[:2] if n.op in _CMP else n.inputs[:1]
        if any(t.dtype is None or np.dtype(t.dtype).kind != "f" or isinstance(t, gs.Constant) for t in data):
            continue
        names = [t.name for t in data]
        if n.op in _TOPK and len(n.inputs) > 1:
            names.append(n.inputs[1].name)
        out = n.outputs[1] if n.op in _TOPK and len(n.outputs) > 1 else n.outputs[0]
        found.append(Decision(n.name or f"{n.op}:{out.name}", n.op, names, out.name, dict(n.attrs)))
    if not found:
        return [], {}
    reach: dict[str, set[str]] = {}
    by_output = {d.output: d.node for d in found}
    for n in graph.nodes:  # graph.nodes is topologically ordered: one forward sweep
        deps = set().union(*(reach.get(t.name, set()) for t in n.inputs))
        for t in n.outputs:
            own = {by_output[t.name]} if t.name in by_output else set()
            if deps or own:
                reach[t.name] = deps | own
    return found, {o.name: sorted(reach[o.name]) for o in graph.outputs if reach.get(o.name)}


def exposed(decisions: list[Decision]) -> list[str]:
    """Tensors a run must return to judge the decisions."""
    return list(dict.fromkeys(n for d in decisions for n in [*d.inputs, d.output]))


def margins(d: Decision, values: dict[str, np.ndarray]) -> np.ndarray | None:
    """Per element of the decision's output: how far its inputs were from choosing otherwise."""
    x = np.asarray(values[d.inputs[0]], dtype=np.float64)
    if d.op in _CMP:
        m = np.abs(x - np.asarray(values[d.inputs[1]], dtype=np.float64))
        return np.where(np.isnan(m), np.inf, m)
    if x.ndim == 0:
        return None
    axis = int(d.attrs.get("axis", -1 if d.op in _TOPK else 0)) % x.ndim
    n = x.shape[axis]
    if n < 2:
        return None
    ordered = np.sort(x, axis=axis)
    if d.op == "ArgMax" or (d.op in _TOPK and d.attrs.get("largest", 1)):
        ordered = np.flip(ordered, axis=axis)
    k = _k(d, values, n)
    gaps = np.abs(np.diff(np.take(ordered, range(min(n, k + 1)), axis=axis), axis=axis))
    gaps = np.where(np.isnan(gaps), np.inf, gaps)
    if d.op in _ARG:
        m = np.take(gaps, [0], axis=axis)
        return m if d.attrs.get("keepdims", 1) else np.squeeze(m, axis=axis)
    return np.repeat(gaps.min(axis=axis, keepdims=True), k, axis=axis)


def _k(d: Decision, values: dict[str, np.ndarray], n: int) -> int:
    """1 for ArgMax/ArgMin; TopK's K (from the run), within 1..n."""
    if d.op in _ARG or len(d.inputs) < 2 or d.inputs[1] not in values:
        return 1 if d.op in _ARG else n
    return max(1, min(int(np.asarray(values[d.inputs[1]]).reshape(-1)[0]), n))


def judge(decisions: list[Decision], depends: dict[str, list[str]], before: list[dict], after: list[dict]) -> dict[str, Any]:
    """Compare the decisions of the original (``before``) and fixed (``after``) runs, feed by feed:
    per decision its smallest margin and the flipped elements with their margins; a flip is a
    near-tie when the inputs moved by at least half its margin. Returns the report's record."""
    records = {d.node: {"op": d.op, "min_margin": float("inf"), "flipped": 0, "margins_at_flips": [], "moved": 0.0,
                        "near_ties": True} for d in decisions}
    for b, a in zip(before, after, strict=True):
        for d in decisions:
            if any(n not in b or n not in a for n in [*d.data, d.output]):
                continue
            rec = records[d.node]
            m = margins(d, b)
            if m is not None and m.size:
                rec["min_margin"] = min(rec["min_margin"], float(m.min()))
            flips = np.asarray(b[d.output]) != np.asarray(a[d.output])
            if not flips.any():
                continue
            moved = max(_moved(b[n], a[n]) for n in d.data)
            at = m[flips] if m is not None and m.shape == flips.shape else np.array([rec["min_margin"]])
            rec["flipped"] += int(flips.sum())
            rec["moved"] = max(rec["moved"], moved)
            rec["margins_at_flips"] = sorted(rec["margins_at_flips"] + [float(v) for v in at])[:_SHOWN]
            rec["near_ties"] = rec["near_ties"] and bool(np.all(at <= EXPLAINED_FACTOR * moved))
    return {"decisions": records, "outputs": depends, "inputs": len(before)}


def _moved(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        return float("inf")
    both = np.isfinite(x) & np.isfinite(y)
    return float(np.abs(x[both] - y[both]).max()) if both.any() else 0.0


def explained(record: dict[str, Any], output: str) -> bool:
    """Every decision ``output`` depends on that flipped did so at near-ties (and one did flip)."""
    upstream = [record["decisions"][n] for n in record["outputs"].get(output, [])]
    flipped = [r for r in upstream if r["flipped"]]
    return bool(flipped) and all(r["near_ties"] for r in flipped)
