"""The TensorRT profile on the printed trtexec/polygraphy lines: one size per shared dim, guesses said.

Two exports built with onnx.helper: a UNet-style denoiser (``sample [batch, 4, height, width]``,
``timestep [batch]``, ``encoder_hidden_states [batch, sequence, 32]``) and a voice-activity
detector with a recurrent state (``input [batch, samples]``, ``state [2, batch_s, 16]``, the
state's batch named apart, as TorchScript exports write it).
"""

from __future__ import annotations

import json
import shlex

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphfix.cli.main import main
from graphfix.pipeline import profile


def _f32(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _i64(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.int64), name)


def unet_style() -> onnx.ModelProto:
    """Conv -> GroupNormalization (no importer before 8.6) -> SiLU -> + time and text conditioning -> Conv."""
    r = np.random.default_rng(0)
    c = 8
    inits = [_f32("w_in", r.standard_normal((c, 4, 3, 3)) / 6), _f32("gs", np.ones(c)), _f32("gb", np.zeros(c)),
             _f32("w_out", r.standard_normal((4, c, 3, 3)) / 8), _f32("wt", r.standard_normal((1, c)) / 4),
             _f32("wtext", r.standard_normal((32, c)) / 6), _i64("cshape", [-1, c, 1, 1]), _i64("ax1", [1])]
    nodes = [helper.make_node("Conv", ["sample", "w_in"], ["h0"], pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["h0", "gs", "gb"], ["h1"], num_groups=2, epsilon=1e-5),
             helper.make_node("Sigmoid", ["h1"], ["s1"]), helper.make_node("Mul", ["h1", "s1"], ["h2"]),
             helper.make_node("Unsqueeze", ["timestep", "ax1"], ["t1"]), helper.make_node("MatMul", ["t1", "wt"], ["t2"]),
             helper.make_node("ReduceMean", ["encoder_hidden_states", "ax1"], ["e1"], keepdims=0),
             helper.make_node("MatMul", ["e1", "wtext"], ["e2"]), helper.make_node("Add", ["t2", "e2"], ["c0"]),
             helper.make_node("Reshape", ["c0", "cshape"], ["c1"]), helper.make_node("Add", ["h2", "c1"], ["h3"]),
             helper.make_node("Conv", ["h3", "w_out"], ["out_sample"], pads=[1, 1, 1, 1])]
    inputs = [helper.make_tensor_value_info("sample", TensorProto.FLOAT, ["batch", 4, "height", "width"]),
              helper.make_tensor_value_info("timestep", TensorProto.FLOAT, ["batch"]),
              helper.make_tensor_value_info("encoder_hidden_states", TensorProto.FLOAT, ["batch", "sequence", 32])]
    outputs = [helper.make_tensor_value_info("out_sample", TensorProto.FLOAT, ["batch", 4, "height", "width"])]
    m = helper.make_model(helper.make_graph(nodes, "unet", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", 21)],
                          ir_version=10)
    onnx.checker.check_model(m, full_check=True)
    return m


def recurrent_state(state_batch: str = "batch_s", activation: str = "Sigmoid") -> onnx.ModelProto:
    """input [batch, samples] in frames of 16 -> LSTM whose h0/c0 are the state [2, batch_s, 16]."""
    r = np.random.default_rng(0)
    hidden = frame = 16
    inits = [_f32("W", r.standard_normal((1, 4 * hidden, frame)) / 4), _f32("R", r.standard_normal((1, 4 * hidden, hidden)) / 4),
             _i64("fshape", [0, -1, frame]), _i64("split", [1, 1]), _f32("wo", r.standard_normal((hidden, 1)) / 4), _i64("ax0", [0])]
    nodes = [helper.make_node("Reshape", ["input", "fshape"], ["fr"]), helper.make_node("Transpose", ["fr"], ["seq"], perm=[1, 0, 2]),
             helper.make_node("Split", ["state", "split"], ["h0", "c0"], axis=0),
             helper.make_node("LSTM", ["seq", "W", "R", "", "", "h0", "c0"], ["Y", "hn", "cn"], hidden_size=hidden),
             helper.make_node("Concat", ["hn", "cn"], ["stateN"], axis=0),
             helper.make_node("ReduceMean", ["hn", "ax0"], ["hm"], keepdims=0),
             helper.make_node("MatMul", ["hm", "wo"], ["lg"]), helper.make_node(activation, ["lg"], ["output"])]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", "samples"]),
              helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, state_batch, hidden])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1]),
               helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, state_batch, hidden])]
    m = helper.make_model(helper.make_graph(nodes, "vad", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", 18)],
                          ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def _fix(tmp_path, model: onnx.ModelProto, capsys, *options: str) -> tuple[dict[str, dict[str, list[int]]], list[str], dict]:
    """Run ``graphfix fix`` and read back the printed trtexec profile (per flag, per input), the
    ``# guessed:`` lines and the JSON report."""
    src, out, report = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(model, src)
    assert main([str(src), str(out), "--report", str(report), *options]) == 0
    printed = capsys.readouterr().out.splitlines()
    trtexec = next(shlex.split(line.split(": ", 1)[1]) for line in printed if line.startswith("trtexec: "))
    shapes = {}
    for arg in trtexec:
        flag, _, value = arg.partition("=")
        if flag in ("--minShapes", "--optShapes", "--maxShapes"):
            shapes[flag] = {n: [int(d) for d in s.split("x")] for n, s in (item.split(":") for item in value.split(","))}
    return shapes, [line for line in printed if line.startswith("# guessed:")], json.loads(report.read_text())


def _sizes_of(model: onnx.ModelProto, shapes: dict[str, dict[str, list[int]]], dims: list[tuple[str, int]]) -> set:
    return {tuple(shapes[flag][name][axis] for flag in ("--minShapes", "--optShapes", "--maxShapes")) for name, axis in dims}


def test_unet_style_profile_keeps_shared_dims_equal_and_says_what_it_guessed(tmp_path, capsys):
    m = unet_style()
    shapes, guessed, report = _fix(tmp_path, m, capsys, "--passes", "auto", "--trt", "8.5")
    assert len(_sizes_of(m, shapes, [("sample", 0), ("timestep", 0), ("encoder_hidden_states", 0)])) == 1  # one batch
    assert all(shapes[f]["sample"][1] == 4 for f in shapes)  # the declared channels
    assert len(guessed) == 1 and "--trt-opt-shapes sample:" in guessed[0]
    for dim in ("batch", "height", "width", "sequence"):
        assert dim in guessed[0]
    recorded = {(n, a) for g in report["engine"]["profile"]["guessed"] for n, a in g["inputs"]}
    assert recorded == {("sample", 0), ("timestep", 0), ("encoder_hidden_states", 0), ("sample", 2), ("sample", 3),
                        ("encoder_hidden_states", 1)}
    assert report["schema"] == 3


def test_recurrent_state_batch_is_the_inputs_batch(tmp_path, capsys):
    """The state's batch is named apart (batch_s): nothing was rewritten at 10.1, and the shapes
    the search picks without running gave it 16 beside the input's 1; the profile ties them."""
    m = recurrent_state()
    shapes, guessed, report = _fix(tmp_path, m, capsys, "--passes", "auto", "--trt", "10.1")
    assert len(_sizes_of(m, shapes, [("input", 0), ("state", 1)])) == 1
    assert all(shapes[f]["state"][0] == 2 and shapes[f]["state"][2] == 16 for f in shapes)  # declared
    assert "samples" in guessed[0] and "without running" in guessed[0]
    tied = next(g for g in report["engine"]["profile"]["guessed"] if ["state", 1] in g["inputs"])
    assert ["input", 0] in tied["inputs"]


def test_verified_recurrent_state_profile_ties_the_batches(tmp_path, capsys):
    m = recurrent_state(activation="HardSwish")  # activation-decompose rewrites it at 8.2: the shapes are verified
    shapes, guessed, report = _fix(tmp_path, m, capsys, "--passes", "auto", "--trt", "8.2")
    assert report["sessions"] > 0 and "verified at" in guessed[0]
    assert len(_sizes_of(m, shapes, [("input", 0), ("state", 1)])) == 1


def test_the_users_profile_is_kept_and_the_other_inputs_follow_its_batch(tmp_path, capsys):
    """--trt-*-shapes for the audio alone: the state takes the user's batch (the tie is the one
    guess left, and said), its other dims are declared."""
    m = recurrent_state()
    shapes, guessed, report = _fix(tmp_path, m, capsys, "--passes", "auto", "--trt", "10.1",
                                   "--trt-min-shapes", "input:1x512", "--trt-opt-shapes", "input:4x8000",
                                   "--trt-max-shapes", "input:8x16000")
    assert [shapes[f]["input"] for f in ("--minShapes", "--optShapes", "--maxShapes")] == [[1, 512], [4, 8000], [8, 16000]]
    assert [shapes[f]["state"] for f in ("--minShapes", "--optShapes", "--maxShapes")] == [[2, 1, 16], [2, 4, 16], [2, 8, 16]]
    assert [(g["inputs"], g["opt"]) for g in report["engine"]["profile"]["guessed"]] == [([["state", 1]], 4)]
    assert len(guessed) == 1 and "batch_s (state[1]: 1..8, opt 4)" in guessed[0]


def test_given_input_shapes_are_not_guesses(tmp_path, capsys):
    m = recurrent_state("batch", activation="HardSwish")
    _, guessed, report = _fix(tmp_path, m, capsys, "--passes", "auto", "--trt", "8.2",
                              "--input-shapes", "input:1x512,state:2x1x16")
    assert guessed == [] and report["engine"]["profile"]["guessed"] == []


def test_the_shape_searchs_records_tie_what_it_set_equal():
    """Where the shape search keeps its records (``shapes.guessed``: the dims it set, ``equals``
    for one it set equal to another), the profile follows them: one size per tied group, the
    first declared dim's."""
    m = recurrent_state("n_state")
    records = [{"dim": "batch", "inputs": [["input", 0]], "role": "batch", "equals": None},
               {"dim": "samples", "inputs": [["input", 1]], "role": "length", "equals": None},
               {"dim": "n_state", "inputs": [["state", 1]], "role": "length", "equals": "batch"}]
    sets = [{"input": [1, 512], "state": [2, 3, 16]}, {"input": [2, 1024], "state": [2, 5, 16]}]
    printed = profile.build(m, sets, records=records)
    assert printed.shapes == {"input": ((1, 512), (1, 512), (2, 1024)), "state": ((2, 1, 16), (2, 1, 16), (2, 2, 16))}
    assert [g["inputs"] for g in printed.guessed] == [[["input", 0], ["state", 1]], [["input", 1]]]
