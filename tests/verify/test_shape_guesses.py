"""What the shape search reads from the graph when no ``--input-shapes`` are given: a symbolic
channel count from the Conv that consumes it, image sides its strides divide, the least length a
reflect Pad, a kernel or a too-short error asks for, and a recurrent state's batch equal to its
input's; and the record of every dim it set (``Choice.guessed``, the report's ``shapes.guessed``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from fixtures.recipes import dynamic_shapes
from fixtures.recipes._onnx import FLOAT, init, inp, model, node, out
from graphfix.cli.main import main
from graphfix.verify import graph_dims
from graphfix.verify.graph_dims import too_short
from graphfix.verify.shapes import Budget, choose, dynamic_dims, plain_symbols

ROOT = Path(__file__).resolve().parents[2]
DYNAMIC = ROOT / "fixtures" / "dynamic_shapes"


def _runs(m: onnx.ModelProto, calls: list | None = None):
    """The search's ``runs`` on a bare onnxruntime session (floats ones, integers ones)."""
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    types = {vi.name: onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type) for vi in m.graph.input}

    def runs(shapes):
        if calls is not None:
            calls.append(shapes)
        try:
            session.run(None, {k: np.ones(shapes.get(k, ()), types[k]) for k in types})
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types
            return str(exc)
        return None

    return runs


def _guess(choice, dim: str) -> dict:
    return next(g for g in choice.guessed if g["dim"] == dim)


def test_a_symbolic_channel_count_is_read_from_the_conv_weight():
    """optimum's ``num_channels``, through a Cast and a Div, is the patch Conv's W.shape[1] x group."""
    m = dynamic_shapes.optimum_patch_embed()
    choice = choose(m, [], _runs(m))
    assert [s["pixel_values"] for s in choice.shapes] == [(1, 3, 224, 224), (2, 3, 256, 256)]
    channels = _guess(choice, "num_channels")
    assert channels["how"] == "graph" and channels["values"] == [3, 3] and "weight" in channels["why"]
    assert _guess(choice, "height")["multiple"] == 4  # the patch stride
    assert "num_channels = 3" in choice.reason


def test_a_channels_last_image_gets_image_sides_through_its_transpose():
    """``[batch, height, width, channels]``: the sides reach the Conv's spatial axes through the
    Transpose, so they are an image's (224), not lengths (16)."""
    m = dynamic_shapes.nhwc_patch_embed()
    choice = choose(m, [], _runs(m))
    assert [s["image"] for s in choice.shapes] == [(1, 224, 224, 3), (2, 256, 256, 3)]
    assert _guess(choice, "height")["role"] == "image" and _guess(choice, "channels")["how"] == "graph"


def test_a_unet_over_the_budget_gets_sides_its_strides_divide_not_the_ladders():
    """Where 224 and up are over the budget, a UNet is verified at 64 and 32 (multiples of its 8x
    downsampling, so every skip Concat matches), not at the ladder's 2x2."""
    m = dynamic_shapes.unet_skips()
    budget = Budget(m)
    at = {side: budget.cost({"sample": (2, 4, side, side)}).memory for side in (64, 128)}
    calls = []
    choice = choose(m, [], _runs(m, calls), max_memory=(at[64] + at[128]) // 2)
    assert [s["sample"] for s in choice.shapes] == [(1, 4, 64, 64), (2, 4, 32, 32)]
    assert all(c["sample"][2] % 8 == 0 for c in calls)
    assert _guess(choice, "height")["multiple"] == 8 and _guess(choice, "channels")["values"] == [4, 4]


def test_an_audio_length_outlasts_its_reflect_pad_and_kernel_and_the_state_batch_follows_the_input():
    """A 16 kHz VAD: reflect Pad 64 then a 256-tap stride-128 Conv need 128 samples; the LSTM's
    initial state (an unnamed dim of ``state``) takes the input's batch."""
    m = dynamic_shapes.vad_state()
    calls = []
    choice = choose(m, [], _runs(m, calls))
    assert [(s["input"], s["state"]) for s in choice.shapes] == [((1, 128), (2, 1, 128)), ((2, 256), (2, 2, 128))]
    assert len(calls) == 2  # read from the graph: nothing failed first
    samples, state = _guess(choice, "samples"), _guess(choice, "?")
    assert samples["minimum"] == 128 and samples["multiple"] == 128
    assert state["how"] == "relation" and state["equals"] == "batch" and "LSTM" in state["why"]
    assert state["inputs"] == [["state", 1]] and state["values"] == [1, 2]


def _hidden_reflect_pad(pad: int) -> onnx.ModelProto:
    """A reflect Pad the graph walk cannot reach (behind a whole-axis Slice, whose output dim onnx's
    inference does not name): only the run's error tells."""
    return model([node("Slice", ["x", "start", "end", "axes"], ["sliced"]), node("Unsqueeze", ["sliced", "axis"], ["x3"]),
                  node("Pad", ["x3", "pads"], ["y"], mode="reflect")],
                 [inp("x", FLOAT, [1, "n"])], [out("y", FLOAT, [1, 1, None])],
                 [init("start", np.array([0], np.int64)), init("end", np.array([2**62], np.int64)),
                  init("axes", np.array([1], np.int64)), init("axis", np.array([0], np.int64)),
                  init("pads", np.array([0, 0, pad, 0, 0, pad], np.int64))])


def test_a_too_short_error_raises_the_length_and_the_search_retries():
    m = _hidden_reflect_pad(200)
    calls = []
    choice = choose(m, [], _runs(m, calls))
    assert [s["x"] for s in choice.shapes] == [(1, 201), (1, 402)]
    assert _guess(choice, "n")["how"] == "learned" and "/Pad_y" in _guess(choice, "n")["why"]
    assert len(calls) <= 4


@pytest.mark.parametrize("message,expected", [
    ("Non-zero status code returned while running Pad node. Name:'/Pad' Status Message: Pad reflect: "
     "pre-pad (64) exceeds maximum allowed (15) for axis 2. Input shape:{1,1,16}", ("/Pad", 65 / 16)),
    ("Non-zero status code returned while running Conv node. Name:'/conv1' Status Message: Invalid input shape: {16}",
     ("/conv1", 2.0)),
    ("Non-zero status code returned while running STFT node. Name:'stft' Status Message: dft.cc:581 "
     "window_size <= signal_size was false. Ensure that the dft size is smaller than the signal.", ("stft", 2.0)),
    ("Non-zero status code returned while running Pad node. Name:'p' Status Message: Cannot use 'edge' mode to pad "
     "dimension with a value of 0. Input shape:{1,0}", ("p", 2.0)),
    ("Non-zero status code returned while running Add node. Name:'a' Status Message: Attempting to broadcast an axis "
     "by a dimension other than 1. 3 by 4", None),
])
def test_onnxruntimes_too_short_errors_are_read(message, expected):
    assert too_short(message) == expected


def test_a_vad_export_verifies_on_the_command_line_without_input_shapes(tmp_path):
    report = tmp_path / "r.json"
    code = main([str(DYNAMIC / "vad_state.onnx"), str(tmp_path / "o.onnx"), "--passes", "all", "--quiet",
                 "--report", str(report)])
    rep = json.loads(report.read_text())
    assert code == 0 and rep["status"] == "ok" and rep["sessions"] >= 2
    assert any(p["verdict"] == "kept" and p["rewritten"] for p in rep["passes"])
    guessed = {g["dim"]: g for g in rep["shapes"]["guessed"]}
    assert guessed["?"]["equals"] == "batch" and guessed["samples"]["minimum"] == 128


_CAPPED = """
import json, resource
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
import graphfix
rep = graphfix.fix({model!r}, "all").report
print(json.dumps({{"status": rep.status, "shapes": rep.shapes}}))
"""


def test_a_diffusers_unet_is_verified_at_latents_its_strides_divide_not_2x2():
    """The UNet2DCondition export: over the budget at 224, it was verified at 2x2 and 4x4 latents;
    now at 64x64 and 32x32 (its stride divides both), in a process with a capped address space."""
    limit = (4 << 30) + (2 << 30)
    script = _CAPPED.format(limit=limit, model=str(ROOT / "fixtures" / "real" / "unet2d_condition.onnx"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rep = json.loads(done.stdout.strip().splitlines()[-1])
    assert rep["status"] == "ok"
    assert [s["sample"][2:] for s in rep["shapes"]["shapes"]] == [[64, 64], [32, 32]]
    assert next(g for g in rep["shapes"]["guessed"] if g["dim"] == "height")["multiple"] == 2  # one 2x downsampling in this tiny config



def _read(nodes: list, inputs: list, inits: list, opset: int = 17):
    """What the graph walk reads from a bare graph (no checker: only the walk is under test)."""
    graph = onnx.helper.make_graph(nodes, "g", inputs, [onnx.helper.make_empty_tensor_value_info(nodes[-1].output[0])], inits)
    m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)], ir_version=8)
    return graph_dims.read(m, plain_symbols(dynamic_dims(m, {})))


def _w(*shape: int):
    return np.zeros(shape, np.float32)


def test_a_grouped_conv_reads_its_channels_as_kernel_channels_times_groups():
    facts = _read([node("Conv", ["x", "w"], ["y"], group=4)], [inp("x", FLOAT, ["n", "c", 8, 8])], [init("w", _w(8, 2, 3, 3))])
    assert facts.sizes["c"][0] == 8


def test_a_conv_transpose_reads_its_channels_from_the_weights_first_dim():
    facts = _read([node("ConvTranspose", ["x", "w"], ["y"])], [inp("x", FLOAT, ["n", "c", 8, 8])], [init("w", _w(6, 2, 3, 3))])
    assert facts.sizes["c"][0] == 6


def test_a_batch_norm_and_a_transpose_on_the_way_keep_the_channel_axis():
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             node("BatchNormalization", ["t", "s", "b", "m", "v"], ["bn"]), node("Relu", ["bn"], ["y"])]
    inits = [init(k, _w(5)) for k in "sbmv"]
    facts = _read(nodes, [inp("x", FLOAT, ["n", "h", "w", "c"])], inits)
    assert facts.sizes["c"] == (5, "/BatchNormalization_bn's scale")


def test_an_unpadded_dilated_kernel_and_an_stft_frame_are_minimum_lengths():
    conv = _read([node("Conv", ["x", "w"], ["y"], dilations=[3])], [inp("x", FLOAT, ["n", 1, "t"])], [init("w", _w(1, 1, 5))])
    assert conv.minimum["t"][0] == 13 and conv.spatial["t"] == 1  # (5 - 1) * 3 + 1
    stft = _read([node("Unsqueeze", ["x", "ax"], ["s"]), node("STFT", ["s", "step", "", "frame"], ["y"])],
                 [inp("x", FLOAT, ["n", "t"])], [init("ax", np.array([2])), init("step", np.array(160)), init("frame", np.array(400))])
    assert stft.minimum["t"][0] == 400


def test_a_padded_conv_asks_for_no_more_than_its_padding_leaves():
    facts = _read([node("Pad", ["x", "p"], ["xp"], mode="constant"), node("Conv", ["xp", "w"], ["y"], pads=[1, 1])],
                  [inp("x", FLOAT, ["n", 1, "t"])], [init("p", np.array([0, 0, 2, 0, 0, 2])), init("w", _w(1, 1, 9))])
    assert facts.minimum["t"][0] == 3  # 9 - 2 - 4


def test_where_the_graph_walk_sees_nothing_a_vad_still_runs_from_its_errors(monkeypatch):
    """The walk and the symbolic relations off: the reflect Pad's and the Conv's errors raise the
    length, and the LSTM's "initial_h must have shape" error has the state's batch tried equal to
    the input's."""
    from graphfix.verify import shapes

    monkeypatch.setattr(shapes.graph_dims, "read", lambda *a, **k: graph_dims.DimFacts())
    monkeypatch.setattr(shapes, "relations", lambda m: ([], []))
    m = dynamic_shapes.vad_state()
    choice = choose(m, [], _runs(m))
    for s in choice.shapes:
        assert s["state"][1] == s["input"][0] and s["input"][1] >= 128, choice.shapes
    assert _guess(choice, "samples")["how"] == "learned"


def _vad_branch(tag: str, pad: int, taps: int) -> onnx.GraphProto:
    """One sample rate's network: reflect Pad, a strided Conv1d, an LSTM on the outer ``state``."""
    hidden, r = 128, np.random.default_rng(7)
    inits = [init(f"pads{tag}", np.array([0, 0, pad, 0, 0, pad], np.int64)),
             init(f"conv{tag}", r.standard_normal((64, 1, taps)).astype(np.float32) * 0.05),
             init(f"W{tag}", r.standard_normal((1, 4 * hidden, 64)).astype(np.float32) * 0.05),
             init(f"R{tag}", r.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.05)]
    nodes = [node("Pad", ["signal", f"pads{tag}"], [f"padded{tag}"], mode="reflect"),
             node("Conv", [f"padded{tag}", f"conv{tag}"], [f"spectrum{tag}"], strides=[taps // 2]),
             node("Transpose", [f"spectrum{tag}"], [f"frames{tag}"], perm=[2, 0, 1]),
             node("LSTM", [f"frames{tag}", f"W{tag}", f"R{tag}", "", "", "h0", "c0"], [f"Y{tag}", f"Yh{tag}"],
                  hidden_size=hidden),
             node("ReduceMean", [f"Y{tag}"], [f"out{tag}"], keepdims=0)]
    return onnx.helper.make_graph(nodes, f"sr{tag}", [], [out(f"out{tag}", FLOAT, [])], inits)


def test_a_vad_whose_network_runs_inside_an_if_on_the_sample_rate_is_read_through_the_branches():
    """silero's VAD runs its network in an If on ``sr``: the walk follows ``input`` and ``state``
    into both branches (the 8 kHz one pads 32 into a 128-tap Conv: 64 samples; 16 kHz: 128)."""
    m = model([node("Unsqueeze", ["input", "axis1"], ["signal"]),
               node("Gather", ["state", "zero"], ["h"], axis=0), node("Gather", ["state", "one"], ["c"], axis=0),
               node("Unsqueeze", ["h", "axis0"], ["h0"]), node("Unsqueeze", ["c", "axis0"], ["c0"]),
               node("Equal", ["sr", "rate16k"], ["is16k"]),
               node("If", ["is16k"], ["output"], then_branch=_vad_branch("16", 64, 256), else_branch=_vad_branch("8", 32, 128))],
              [inp("input", FLOAT, ["batch", "samples"]), inp("state", FLOAT, [2, None, 128]), inp("sr", onnx.TensorProto.INT64, [])],
              [out("output", FLOAT, [])],
              [init("axis0", np.array([0], np.int64)), init("axis1", np.array([1], np.int64)),
               init("zero", np.array(0, np.int64)), init("one", np.array(1, np.int64)), init("rate16k", np.array(16000, np.int64))])
    calls = []
    choice = choose(m, [], _runs(m, calls))
    assert len(calls) == 2, calls  # nothing failed first
    for s in choice.shapes:
        assert s["input"][1] >= 128 and s["state"][1] == s["input"][0], choice.shapes
