"""``--set-input NAME=VALUE`` on the command line: repeatable, written into the model's metadata,
refused in one line (exit 2, nothing written) for what cannot be frozen."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from fixtures.recipes._onnx import BOOL, FLOAT, inp, model, node, out
from graphfix.pipeline.set_inputs import METADATA_KEY
from tests.helpers.cli_runs import refused, run, save
from tests.helpers.control_flow import voice_activity_detector
from tests.helpers.support import ort_run


def _gated() -> onnx.ModelProto:
    """y = where(flag, x * gain, x), plus an input nothing reads."""
    return model([node("Mul", ["x", "gain"], ["scaled"]), node("Where", ["flag", "scaled", "x"], ["y"])],
                 [inp("x", FLOAT, [2, 3]), inp("gain", FLOAT, [3]), inp("flag", BOOL, []), inp("unused", FLOAT, [1])],
                 [out("y", FLOAT, [2, 3])])


def test_repeated_set_inputs_are_frozen_and_recorded(tmp_path, capfd):
    src = save(_gated(), tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / "out.onnx", "--set-input", "flag=true", "--set-input", "gain=[2,2,2]", "--quiet"], capfd)
    assert rc == 0, err
    written = onnx.load(str(tmp_path / "out.onnx"))
    assert [i.name for i in written.graph.input] == ["x", "unused"]
    assert json.loads({p.key: p.value for p in written.metadata_props}[METADATA_KEY]) == {"flag": True, "gain": [2.0, 2.0, 2.0]}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ort_run(written, {"x": x, "unused": np.zeros(1, np.float32)})[0], 2 * x)


def test_a_sample_rate_on_the_command_line_leaves_no_if(tmp_path, capfd):
    src = save(voice_activity_detector(), tmp_path / "vad.onnx")
    rc, _, err = run([src, tmp_path / "out.onnx", "--passes", "auto", "--trt", "8.5", "--set-input", "sr=16000", "--quiet"], capfd)
    assert rc == 0, err
    assert "If" not in [n.op_type for n in onnx.load(str(tmp_path / "out.onnx")).graph.node]


@pytest.mark.parametrize("entry,expect", [
    ("nope=1", ("in.onnx", "unknown input 'nope'")),
    ("gain=[1,2]", ("in.onnx", "the value is 2, the input is 3")),
    ("flag=2", ("in.onnx", "not a value of the input's type bool")),
    ("gain=loud", ("in.onnx", "expected a number")),
    ("unused=0", ("in.onnx", "nothing in the model reads this input")),
    ("flag", ("bad --set-input entry",)),
])
def test_what_cannot_be_frozen_is_refused_in_one_line(tmp_path, capfd, entry, expect):
    src = save(_gated(), tmp_path / "in.onnx")
    refused([src, tmp_path / "out.onnx", "--set-input", entry], capfd, tmp_path, expect)
