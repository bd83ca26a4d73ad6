"""A broken, corrupt or unusual model is one line and exit 2 (or a finding), never a traceback:
bad external data, sizes over 2 GiB, inputs verification cannot feed, non-UTF-8 strings,
sequence outputs, ai.onnx.ml-only models; inputs it can feed still run.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from graphfix.cli.main import main
from graphfix.errors import GraphfixError
from tests.helpers.cli_runs import FIXTURE, ROOT, external_model, refused, relu_model, run, save, set_location


@pytest.mark.parametrize("kind,expect", [
    ("missing", ("in.data", "does not exist")),
    ("outside", ("../x.data", "outside the model's folder")),
    ("absolute", ("absolute path",)),
    ("short", ("in.data", "bytes")),
])
def test_bad_external_data_is_one_line(kind, expect, tmp_path, capfd):
    folder = tmp_path / "m"
    if kind == "missing":
        src = external_model(folder)
        (folder / "in.data").unlink()
    elif kind == "outside":
        src = external_model(folder, "../x.data")
    elif kind == "absolute":
        src = external_model(folder, str(tmp_path / "abs.data"))
    else:
        src = external_model(folder)
        set_location(src, "in.data", length=str(10**12))
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, expect)
    assert str(src) in line
    refused(["check", src, "--trt", "8.6"], capfd, tmp_path, expect)


@pytest.mark.parametrize("kind,expect", [
    ("string", ("'x'", "string")),
    ("bfloat16", ("'x'", "bfloat16")),
    ("float8", ("'x'", "float8")),
    ("complex64", ("'x'", "complex64")),
    ("sequence", ("'s'", "sequence")),
    ("optional", ("'o'", "optional")),
    ("huge", ("'x'", "2 GiB")),
])
def test_inputs_verification_cannot_feed_are_refused(kind, expect, tmp_path, capfd):
    T = TensorProto
    if kind in ("string", "bfloat16", "float8", "complex64"):
        m = relu_model({"string": T.STRING, "bfloat16": T.BFLOAT16, "float8": T.FLOAT8E4M3FN, "complex64": T.COMPLEX64}[kind], opset=21)
    elif kind == "sequence":
        g = helper.make_graph([helper.make_node("SequenceAt", ["s", "i"], ["y"])], "g",
                              [helper.make_tensor_sequence_value_info("s", T.FLOAT, [2]), helper.make_tensor_value_info("i", T.INT64, [])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    elif kind == "optional":
        opt = helper.make_value_info("o", helper.make_optional_type_proto(helper.make_tensor_type_proto(T.FLOAT, [2])))
        g = helper.make_graph([helper.make_node("OptionalGetElement", ["o"], ["y"])], "g", [opt], [helper.make_tensor_value_info("y", T.FLOAT, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    else:
        m = relu_model(shape=(100000, 100000))
    src = save(m, tmp_path / "in.onnx")
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, expect)
    assert "Traceback" not in line
    if kind != "huge":
        assert "--no-verify" in line
        rc, _, err = run([src, tmp_path / "out.onnx", "--no-verify", "--quiet"], capfd)
        assert rc == 0, err


@pytest.mark.parametrize("elem", [TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT8, TensorProto.UINT16, TensorProto.BOOL])
def test_runnable_input_types_still_work(elem, tmp_path, capfd):
    src = save(relu_model(elem, opset=21), tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / "out.onnx", "--quiet"], capfd)
    assert rc == 0, err


def test_model_file_over_2_gib_is_refused(tmp_path, capfd):
    big = tmp_path / "big.onnx"
    with open(big, "wb") as fh:  # sparse: costs no disk
        fh.write(FIXTURE.read_bytes())
        fh.truncate(2**31 + 10)
    refused([big, tmp_path / "out.onnx"], capfd, tmp_path, ("big.onnx", "2 GiB", "external data"))


def test_external_data_length_that_does_not_match_the_dims_is_refused(tmp_path, capfd):
    """Over 2 GiB of external data is fine (written as external data again); a length that does
    not match the tensor is a one-line refusal before any work."""
    src = external_model(tmp_path)
    with open(tmp_path / "in.data", "r+b") as fh:
        fh.truncate(2**31 + 10)
    set_location(src, "in.data", length=str(2**31 + 10 - 0))
    refused([src, tmp_path / "out.onnx"], capfd, tmp_path, ("length", "dims"))


def test_in_memory_model_over_2_gib_is_refused_by_the_api(monkeypatch):
    """A ModelProto handed to the API that protobuf could not serialise (limit lowered to test)."""
    import graphfix
    import graphfix.onnxio.paths as paths

    m = relu_model()
    monkeypatch.setattr(paths, "MAX_MODEL_BYTES", m.ByteSize() - 1)
    with pytest.raises(GraphfixError, match="2 GiB"):
        graphfix.fix(m)


def test_sequence_output_is_refused_naming_no_verify(tmp_path, capfd):
    g = helper.make_graph([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
                          [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)])
    src = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "in.onnx")
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, ("'s'", "sequence", "--no-verify"))
    assert "cannot run" not in line


def test_model_importing_only_ai_onnx_ml_is_refused(tmp_path, capfd):
    g = helper.make_graph([helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml", norm="L2")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    src = save(helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)], ir_version=8), tmp_path / "in.onnx")
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, "ai.onnx.ml")
    assert "opset 1" not in line


def _corrupt(kind: str) -> onnx.ModelProto:
    """A MatMul model with one corruption a bit flip or a broken writer leaves parseable."""
    w = numpy_helper.from_array(np.ones((3, 3), np.float32), "w")
    m = model([node("MatMul", ["x", "w"], ["y"])], [inp("x", FLOAT, [1, 3])], [out("y", FLOAT, [1, 3])], [w])
    if kind == "initializer type":
        m.graph.initializer[0].data_type = 65
    elif kind == "declared type":
        m.graph.value_info.append(helper.make_tensor_value_info("y", FLOAT, [1, 3]))
        m.graph.value_info[0].type.tensor_type.elem_type = 77
    elif kind == "data size":
        m.graph.initializer[0].dims[0] = 4
    return m


@pytest.mark.parametrize("kind,says", [("initializer type", "tensor 'w' has an unknown element type (65)"),
                                       ("declared type", "value 'y' declares an unknown element type (77)"),
                                       ("data size", "tensor 'w' has dims [4, 3] (12 element(s)) but holds data for a different count"),
                                       ("producer bytes", "invalid model: model field producer_name (b'graphfix-\\x9e")])
def test_corrupt_but_parseable_models_are_one_line_errors(kind, says, tmp_path, capfd):
    src = tmp_path / "in.onnx"
    data = _corrupt(kind).SerializeToString()
    if kind == "producer bytes":  # a flipped byte in a string field: protobuf parses it, Python cannot decode it
        data = data.replace(b"graphfix-fixtures", b"graphfix-\x9e\xc4xtures")
    src.write_bytes(data)
    before = src.read_bytes()
    assert main([str(src), str(tmp_path / "out.onnx"), "--no-verify"]) == 2
    err = capfd.readouterr().err
    assert err.startswith(f"graphfix: error: {src}: invalid ") and says in err and len(err.strip().splitlines()) == 1
    assert src.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx"]


def test_a_negative_declared_dim_is_no_longer_refused(tmp_path, capfd):
    """Once refused as corrupt (onnx's shape inference aborted on some): onnxruntime and TensorRT
    read a negative dim as dynamic, and older paddle2onnx writes -1 (graphfix.onnxio.dims)."""
    m = _corrupt("data size")
    m.graph.initializer[0].dims[0] = 3
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = -3
    src = save(m, tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / "out.onnx", "--no-verify"], capfd)
    assert rc == 0 and "Traceback" not in err, err
    assert onnx.load(str(tmp_path / "out.onnx")).graph.input[0].type.tensor_type.shape.dim[1].dim_value == -3


def _string_attribute_model(op: str) -> onnx.ModelProto:
    """A Pad whose mode, or a Conv whose auto_pad, is a byte string that is not UTF-8."""
    if op == "Pad":
        m = model([node("Pad", ["x", "p"], ["y"], mode="reflect")], [inp("x", FLOAT, [1, 3, 4, 4])], [out("y", FLOAT, [1, 3, 6, 6])],
                  [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "p")])
        m.graph.node[0].attribute[0].s = b"\xf2\x80refl"
        return m
    m = model([node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")], [inp("x", FLOAT, [1, 1, 4, 4])], [out("y", FLOAT, [1, 1, 4, 4])],
              [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")])
    m.graph.node[0].attribute[0].s = b"SAME\xffUPPER"
    return m


@pytest.mark.parametrize("op,attr", [("Pad", "mode"), ("Conv", "auto_pad")])
def test_string_attribute_not_utf8_is_refused_by_every_command(op, attr, tmp_path, capfd):
    src = save(_string_attribute_model(op), tmp_path / "in.onnx")
    log = tmp_path / "build.log"
    log.write_text("[E] [TRT] ModelImporter.cpp:771: While parsing node number 0 [Pad -> \"y\"]:\n")
    expect = ("in.onnx", f"attribute '{attr}'", "not valid UTF-8")
    refused([src, tmp_path / "out.onnx"], capfd, tmp_path, expect)
    refused(["check", src, "--trt", "8.6"], capfd, tmp_path, expect)
    refused(["explain", log, "--model", src], capfd, tmp_path, expect)


def _short_pads_model() -> onnx.ModelProto:
    """``Constant([1]) -> Pad(x: [b, s])``: two pads short (unchecked: onnx's inference rejects it)."""
    g = helper.make_graph([node("Constant", [], ["p"], value=numpy_helper.from_array(np.array([1], np.int64))),
                           node("Pad", ["x", "p"], ["y"])], "g", [inp("x", FLOAT, ["b", "s"])], [out("y", FLOAT, ["b", "t"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_pad_with_short_pads_is_a_finding_not_a_crash(tmp_path, capfd):
    src = save(_short_pads_model(), tmp_path / "in.onnx")
    rc, text, err = run(["check", src, "--trt", "7.2"], capfd)
    assert rc == 1 and "Traceback" not in err and not err, err
    assert "Pad" in text
    rc, _, err = run([src, tmp_path / "out.onnx", "--trt", "7.2", "--no-verify", "--quiet",
                      "--report", tmp_path / "r.json"], capfd)
    assert rc == 4 and "Traceback" not in err, err  # written; TensorRT 7.2 still rejects the Pad it could not rewrite


    report = json.loads((tmp_path / "r.json").read_text())
    assert "pads hold 1 value(s)" in json.dumps(report)


def test_string_input_is_fixed_without_verification(tmp_path, capfd):
    m = onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx"))
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    src = save(m, tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / "out.onnx", "--no-verify", "--quiet"], capfd)
    assert rc == 0, err
    onnx.checker.check_model(onnx.load(str(tmp_path / "out.onnx")))


def test_external_data_key_not_utf8_is_refused(tmp_path, capfd):
    w = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    m = model([node("MatMul", ["x", "w"], ["y"])], [inp("x", FLOAT, [2, 16])], [out("y", FLOAT, [2, 16])], [w])
    onnx.save_model(m, str(tmp_path / "in.onnx"), save_as_external_data=True, location="in.data", size_threshold=0)
    m = onnx.load(str(tmp_path / "in.onnx"), load_external_data=False)
    for key in ("k", "j"):  # onnx sorts unknown keys for its warning: str next to bytes fails
        entry = m.graph.initializer[0].external_data.add()
        entry.key, entry.value = key, "1"
    data = m.SerializeToString().replace(b"\x0a\x01j", b"\x0a\x01\xff")
    (tmp_path / "in.onnx").write_bytes(data)
    expect = ("in.onnx", "tensor 'w'", "not valid UTF-8")
    refused([tmp_path / "in.onnx", tmp_path / "out.onnx"], capfd, tmp_path, expect)
    refused(["check", tmp_path / "in.onnx", "--trt", "8.6"], capfd, tmp_path, expect)
