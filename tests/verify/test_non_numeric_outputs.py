"""Outputs with no numeric difference to measure (strings, which onnxruntime returns as object
arrays; bools) beside a rewrite: compared for equality, reported and written to the polygraphy
outputs file, never an internal error (a TypeError subtracting str from str)."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from polygraphy.comparator import RunResults

from fixtures.recipes._onnx import FLOAT, const, inp, model, node, out
from graphfix.cli.main import main
from graphfix.verify import compare


def _beside_a_rewrite() -> onnx.ModelProto:
    """A Clip with a computed bound (fold-clip rewrites it) beside a string constant's Identity, a
    float Cast to string and a bool comparison, all outputs."""
    labels = helper.make_node("Constant", [], ["labels_c"], value=numpy_helper.from_array(np.array(["cat", "dog"], dtype=object), "labels_c"))
    return model(
        [const("lo", np.array(-0.5, np.float64)), node("Cast", ["lo"], ["lof"], to=FLOAT), node("Clip", ["x", "lof"], ["y"]),
         labels, node("Identity", ["labels_c"], ["labels"]), node("Cast", ["x"], ["text"], to=TensorProto.STRING),
         node("Greater", ["x", "lof"], ["mask"])],
        [inp("x", FLOAT, [2, 3])],
        [out("y", FLOAT, [2, 3]), out("labels", TensorProto.STRING, [2]), out("text", TensorProto.STRING, [2, 3]),
         out("mask", TensorProto.BOOL, [2, 3])])


def test_string_and_bool_outputs_beside_a_rewrite_are_compared_and_reported(tmp_path, capfd):
    src, dst, rep = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(_beside_a_rewrite(), str(src))
    code = main([str(src), str(dst), "--passes", "fold-clip", "--report", str(rep), "--quiet"])
    assert code == 0, capfd.readouterr().err
    report = json.loads(rep.read_text())
    assert report["passes"][0]["verdict"] == "kept"
    assert {name: d["passed"] for name, d in report["final"].items()} == {"y": True, "labels": True, "text": True, "mask": True}
    assert (tmp_path / "r.outputs.json").stat().st_size > 0


def _results(values: dict[str, np.ndarray]) -> RunResults:
    return RunResults([("run", [compare.iteration_result(values, 0.0, "run")])])


def test_strings_that_differ_fail_by_equality_and_say_how_many():
    ref = _results({"s": np.array(["cat", "dog", "eel"], dtype=object)})
    cand = _results({"s": np.array(["cat", "cow", "eel"], dtype=object)})
    diff = compare.compare(ref, cand, 1.0, 1.0)["s"]
    assert not diff.passed and "1 of 3" in diff.note and "equality" in diff.note
    assert compare.compare(ref, ref, 0.0, 0.0)["s"].passed


def test_an_inexact_steps_deviation_of_a_string_output_is_equality():
    """--dequantize-dynamic beside a string output exited 3 (``abs()`` of str measuring the
    output's peak): found by the fuzz's string outputs."""
    ref = _results({"s": np.array(["cat", "dog"], dtype=object), "y": np.array([1.0, 2.0], np.float32)})
    same = _results({"s": np.array(["cat", "dog"], dtype=object), "y": np.array([1.0, 2.01], np.float32)})
    other = _results({"s": np.array(["cat", "cow"], dtype=object), "y": np.array([1.0, 2.0], np.float32)})
    kept = compare.deviation(ref, same, {}, 4.0, 0.05)
    assert kept["s"].passed and kept["s"].bound == "equal" and kept["y"].passed
    assert not compare.deviation(ref, other, {}, 4.0, 0.05)["s"].passed
