"""Discrete outputs: decisions found, margins measured, near-tie flips reported and kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphfix
from fixtures.recipes._onnx import FLOAT, INT64, const, inp, model, node, out
from graphfix.analysis import discrete
from graphfix.graph import replace_tensor, to_graph
from graphfix.passes import Pass
from graphfix.passes.base import LIMIT, Rule

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
C = 37.3


def _argmax_model() -> object:
    return model([const("c", C, np.float32), node("Mul", ["x", "c"], ["y"], name="/Mul"),
                  node("ArgMax", ["y"], ["idx"], name="/ArgMax", axis=1, keepdims=0)],
                 [inp("x", FLOAT, [64, 2])], [out("idx", INT64, [64])])


def _mul_as_div(node_, ctx):
    """x * c -> x / (1 / c): the same value to an ulp, so near-ties may order differently."""
    replace_tensor(ctx.graph, node_.outputs[0], ctx.builder.op("Div", [node_.inputs[0], np.array(1 / C, np.float32)]))


MUL_AS_DIV = Pass("mul-as-div", "test", frozenset({"Mul"}), (Rule(LIMIT, "all", "test", evidence="test"),), _mul_as_div, doc="test")


def _near_ties() -> np.ndarray:
    """Rows (a, next float after a) where a * c and a / (1 / c) order the pair differently."""
    rng = np.random.default_rng(0)
    a = rng.uniform(0.1, 1, 20000).astype(np.float32)
    b = np.nextafter(a, np.float32(2))
    c, inv = np.float32(C), np.float32(1 / C)
    flips = np.argmax(np.stack([a * c, b * c]), 0) != np.argmax(np.stack([a / inv, b / inv]), 0)
    rows = np.stack([a, b], 1)
    return np.concatenate([rows[flips][:8], rows[~flips][:56]])


def test_decisions_and_the_outputs_depending_on_them():
    found, depends = discrete.find(to_graph(_argmax_model()))
    assert [(d.op, d.inputs, d.output) for d in found] == [("ArgMax", ["y"], "idx")]
    assert depends == {"idx": ["/ArgMax"]}


def test_near_tie_flips_are_kept_and_reported():
    result = graphfix.fix(_argmax_model(), passes=[MUL_AS_DIV], inputs=[{"x": _near_ties()}])
    assert result.report.passes[0].verdict == "kept", result.report.passes[0].reason
    rec = result.report.discrete["decisions"]["/ArgMax"]
    assert rec["flipped"] == 8 and rec["near_ties"]
    assert max(rec["margins_at_flips"]) <= 2 * rec["moved"] and rec["moved"] > 0
    assert "near-tie" in result.report.final["idx"]["note"]
    assert "flipped" in graphfix.report.summary.table(result.report)


def test_superglue_matcher_names_its_tie_sensitive_outputs_and_flips_at_two_inputs():
    realistic = {"keypoints0": (0, 640), "keypoints1": (0, 640), "scores0": (0, 1), "scores1": (0, 1),
                 "descriptors0": (-0.2, 0.2), "descriptors1": (-0.2, 0.2)}
    result = graphfix.fix(str(REAL / "superglue_sinkhorn_argmax.onnx"), "auto", trt="8.5", seed=7, val_range=realistic)
    record = result.report.discrete
    assert record["inputs"] == 2
    assert set(record["outputs"]) == {"matches0", "matching_scores0"}
    flipped = [r for r in record["decisions"].values() if r["flipped"]]
    assert flipped and all(r["near_ties"] and r["margins_at_flips"] for r in flipped)
    assert result.report.status == "ok"


@given(st.integers(2, 6), st.integers(1, 5), st.integers(0, 1), st.integers(0, 2**31 - 1))
def test_margins_are_the_gap_that_decides(n, rows, largest, seed):
    x = np.random.default_rng(seed).standard_normal((rows, n))
    k = max(1, n - 1)
    top = discrete.Decision("t", "TopK", ["x", "k"], "i", {"axis": 1, "largest": largest})
    got = discrete.margins(top, {"x": x, "k": np.array([k])})
    ordered = np.sort(x, 1)[:, ::-1] if largest else np.sort(x, 1)
    assert got.shape == (rows, k)
    np.testing.assert_allclose(got[:, 0], np.abs(np.diff(ordered[:, : k + 1], axis=1)).min(1))
    arg = discrete.Decision("a", "ArgMax", ["x"], "i", {"axis": 1, "keepdims": 0})
    desc = np.sort(x, 1)[:, ::-1]
    np.testing.assert_allclose(discrete.margins(arg, {"x": x}), desc[:, 0] - desc[:, 1])


@pytest.mark.parametrize("op", ["Greater", "LessOrEqual"])
def test_comparison_margin_is_the_distance(op):
    d = discrete.Decision("g", op, ["a", "b"], "o", {})
    np.testing.assert_allclose(discrete.margins(d, {"a": np.array([1.0, 2.0]), "b": np.array(1.5)}), [0.5, 0.5])
