"""Only graphfix's own lines reach the terminal: onnxruntime's, polygraphy's and onnx-graphsurgeon's
logs stay quiet, and a reader that closes the pipe is a normal end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from fixtures.recipes._onnx import FLOAT, inp, model, node, out
from tests.helpers.cli_runs import ROOT, refused, save


def test_onnxruntime_and_polygraphy_logs_stay_quiet(tmp_path, capfd):
    sh = numpy_helper.from_array(np.array([5, 7], np.int64), "sh")
    lo = numpy_helper.from_array(np.array(-1.0, np.float64), "lo")
    m = model([node("Reshape", ["x", "sh"], ["r"]), node("Cast", ["lo"], ["lof"], to=FLOAT),  # a Clip fold-clip rewrites:
               node("Clip", ["r", "lof"], ["y"])], [inp("x", FLOAT, [2, 3])], [out("y", FLOAT, [5, 7])], [sh, lo])  # verified
    src = save(m, tmp_path / "in.onnx")
    line = refused([src, tmp_path / "out.onnx"], capfd, tmp_path, "onnxruntime cannot run the input model")
    assert "\x1b[" not in line


def _with_local_function(src: Path) -> Path:
    """A model with a model-local function (imported by onnx-graphsurgeon's own importer) whose
    Clip bounds fold-clip rewrites (new node names are handed out)."""
    m = onnx.load(str(ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx"))
    m.functions.append(helper.make_function("local", "Unused", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                            [helper.make_opsetid("", 17)]))
    m.opset_import.append(helper.make_opsetid("local", 1))
    return save(m, src)


def test_quiet_run_prints_nothing_but_graphfix(tmp_path):
    """HOME unwritable (onnxruntime's telemetry warns at import), a graph onnx-graphsurgeon
    imported (its logger warns about colours and unregistered functions on stdout)."""
    src = _with_local_function(tmp_path / "in.onnx")
    env = {**os.environ, "HOME": "/dev/null", "PYTHONPATH": str(ROOT)}
    env.pop("XDG_CACHE_HOME", None)
    quiet = subprocess.run([sys.executable, "-m", "graphfix", src, tmp_path / "out.onnx", "--quiet"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "", quiet
    loud = subprocess.run([sys.executable, "-m", "graphfix", src, tmp_path / "out2.onnx"],
                          capture_output=True, text=True, env=env, timeout=300)
    said = [line for line in loud.stderr.splitlines() if not re.match(r"graphfix: .* \.\.\. \d+\.\ds$", line)]  # phase lines
    assert loud.returncode == 0 and said == [f"wrote {tmp_path / 'out2.onnx'}"], loud
    assert not [line for line in loud.stdout.splitlines() if line.startswith(("[W]", "[E]", "[I]"))], loud.stdout


def test_builder_names_on_a_graph_graphfix_did_not_import(capfd):
    import onnx_graphsurgeon as gs

    from graphfix.graph.build import Builder

    assert Builder(gs.Graph(opset=17)).name("x")
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize("command", [["passes"], ["check", ROOT / "fixtures" / "fold_clip" / "clip_cast_bounds.onnx", "--trt", "7.2"]])
def test_closed_stdout_is_a_normal_end(command):
    """``graphfix passes | head -1``: the reader is gone before graphfix writes (closed here at
    once, so the write fails every time): exit 141 as SIGPIPE would give, nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "graphfix", *map(str, command)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141 and err == "", err
