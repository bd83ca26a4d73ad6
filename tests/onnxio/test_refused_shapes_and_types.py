"""Models no tensor library can hold are refused at load in one line (exit 2), not a numpy or
onnx error inside a pass (exit 3): found by the mutation fuzz (tests/robustness/test_fuzz.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from graphfix.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def _clip_model(input_type: int = TensorProto.FLOAT, bound_dims: int = 0) -> onnx.ModelProto:
    lo = helper.make_tensor("lo", TensorProto.FLOAT, [1] * bound_dims, [0.0])  # numpy cannot make 65 dims
    g = helper.make_graph([helper.make_node("Clip", ["x", "lo"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", input_type, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [lo])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _refused(model: onnx.ModelProto, tmp_path, capfd, *extra: str) -> str:
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    assert main([str(src), str(tmp_path / "out.onnx"), "--quiet", *extra]) == 2
    err = capfd.readouterr().err
    assert err.startswith("graphfix: error: ") and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.onnx").exists()
    return err


def test_an_input_without_an_element_type_is_refused(tmp_path, capfd):
    err = _refused(_clip_model(input_type=TensorProto.UNDEFINED), tmp_path, capfd, "--no-verify")
    assert "input 'x' declares an unknown element type (0)" in err


def test_a_tensor_of_more_than_64_dimensions_is_refused(tmp_path, capfd):
    err = _refused(_clip_model(bound_dims=65), tmp_path, capfd, "--trt", "7.2")
    assert "tensor 'lo' has 65 dimensions (at most 64)" in err


def test_an_attribute_value_onnx_inference_crashes_on_is_refused(tmp_path):
    """GatherND batch_dims -2147483649 segfaulted onnx's shape inference in graphfix's own process
    (exit 139, no message): found by the fuzz's out-of-spec attributes. In a subprocess, so that
    the crash, if it comes back, fails this test rather than ending the test run."""
    g = helper.make_graph([helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=-(2**31) - 1)], "g",
                          [helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 3, 4]),
                           helper.make_tensor_value_info("i", TensorProto.INT64, [2, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    src = tmp_path / "m.onnx"
    src.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    run = subprocess.run([sys.executable, "-m", "graphfix", str(src), str(tmp_path / "out.onnx"), "--quiet", "--no-verify"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert run.stderr.startswith("graphfix: error: ") and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "attribute 'batch_dims' of GatherND node" in run.stderr and "-2147483649" in run.stderr, run.stderr
    assert not (tmp_path / "out.onnx").exists()


def test_an_einsum_equation_onnx_inference_loops_on_is_refused(tmp_path):
    """Einsum equation "ab\\n" on a rank-2 input: onnx's shape inference never returned (graphfix's
    run hung in-process; found by the fuzz). In a subprocess with a timeout, so that a hang fails
    this test instead of stopping the test run."""
    g = helper.make_graph([helper.make_node("Einsum", ["x"], ["y"], equation="ab\n")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    src = tmp_path / "m.onnx"
    src.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    try:
        run = subprocess.run([sys.executable, "-m", "graphfix", str(src), str(tmp_path / "out.onnx"), "--quiet", "--no-verify"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("graphfix hung on the equation") from None
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, (run.returncode, run.stderr)
    assert "attribute 'equation' of Einsum node" in run.stderr and "'ab\\n'" in run.stderr, run.stderr


def _groupnorm(num_groups: onnx.AttributeProto) -> onnx.ModelProto:
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)
    node.attribute.append(num_groups)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3])],
                          [helper.make_tensor("s", TensorProto.FLOAT, [2], [1.0, 1.0]), helper.make_tensor("b", TensorProto.FLOAT, [2], [0.0, 0.0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_an_attribute_of_another_type_than_the_op_declares_is_refused(tmp_path, capfd):
    """onnx.checker stops at opset-18 GroupNormalization's deprecation (tolerated) before its
    attributes: ``num_groups`` given as a tensor reached groupnorm-decompose's predicate (exit 3, a
    TypeError; found by the fuzz)."""
    err = _refused(_groupnorm(helper.make_attribute("num_groups", helper.make_tensor("t", TensorProto.FLOAT, [1], [2.0]))),
                   tmp_path, capfd, "--no-verify")
    assert "attribute 'num_groups' of GroupNormalization node" in err and "is TENSOR, the op takes INT" in err


def test_the_checker_goes_on_past_an_output_typed_without_a_shape(tmp_path, capfd):
    """An output typed without a shape is tolerated, but onnx.checker stopped there: a Range whose
    output was cleared reached range-inputs (exit 3, an IndexError; found by the fuzz). The rest of
    the model is checked as if the output had a shape."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Range", ["a", "b", "c"], [])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor(n, TensorProto.FLOAT, [], [v]) for n, v in (("a", 0.0), ("b", 4.0), ("c", 1.0))])
    err = _refused(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path, capfd, "--no-verify")
    assert "Range" in err, err


def test_an_output_with_no_type_beside_one_without_a_shape_is_accepted(tmp_path, capfd):
    """The scripted VAD's outputs: one typed without a shape (where the checker stops), one with no
    type at all (which it reaches once it goes on): onnxruntime runs the model, so graphfix takes it."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["z"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), onnx.ValueInfoProto(name="z")])
    src = tmp_path / "m.onnx"
    src.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    assert main([str(src), str(tmp_path / "out.onnx"), "--quiet", "--no-verify"]) == 0, capfd.readouterr().err


def test_a_tensor_attribute_without_its_tensor_is_refused(tmp_path, capfd):
    """A Constant whose ``value`` attribute lost its tensor (the fuzz's seed 13 case 9079) reached the
    export ("Unsupported type: 0") and the report (bytes in JSON): exit 3. One line, exit 2."""
    model = _clip_model()
    value = onnx.AttributeProto(name="value", type=onnx.AttributeProto.TENSOR)
    node = helper.make_node("Constant", [], ["k"], name="k")
    node.attribute.append(value)
    model.graph.node.insert(0, node)
    err = _refused(model, tmp_path, capfd)
    assert "tensor attribute without its tensor" in err, err


def test_the_checker_goes_on_past_an_input_typed_without_a_shape(tmp_path, capfd):
    """The fuzz's seed 7 case 4053: an input whose shape was cleared (the checker stops there,
    tolerated: onnxruntime runs it) hid a Pad without its pads input, which reached pad-to-concat
    (exit 3, an IndexError). onnxruntime refuses that Pad; so does graphfix, in one line."""
    g = helper.make_graph([helper.make_node("Pad", ["x"], ["y"], name="/Pad", mode="reflect")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])])
    err = _refused(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp_path, capfd, "--trt", "7.2")
    assert "Pad" in err and "input size 1" in err, err


def test_an_input_typed_without_a_shape_is_still_accepted(tmp_path, capfd):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    src = tmp_path / "m.onnx"
    src.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    assert main([str(src), str(tmp_path / "out.onnx"), "--quiet", "--no-verify"]) == 0, capfd.readouterr().err
