"""onnxruntime runs in graphfix's worker process: a crash or an endless run there is one line and
exit 2, SIGINT/SIGTERM end the run within a second while onnxruntime computes, and a batch
(``--out-dir``) is a transaction per model that a signal stops and that keeps every model's own
weights."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper, numpy_helper

import graphfix
from graphfix.errors import OnnxruntimeDied
from graphfix.runtime import worker as runtime_worker

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "demo" / "superglue_matcher.onnx"


def rewritten(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` plus a Clip whose bound is computed (Constant -> Cast), which fold-clip rewrites: a run
    that rewrites nothing opens no onnxruntime session, so without it nothing would reach the crash."""
    g = m.graph
    g.node.extend([helper.make_node("Constant", [], ["lo64"], value=numpy_helper.from_array(np.array(-1.0, np.float64))),
                   helper.make_node("Cast", ["lo64"], ["lo"], to=TensorProto.FLOAT),
                   helper.make_node("Clip", ["z", "lo"], ["w"])])
    g.input.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1]))
    g.output.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [1]))
    return m


def segfaulting() -> onnx.ModelProto:
    """Einsum whose second input is the empty name, first input with a symbolic dim: onnxruntime
    1.32 dies of SIGSEGV making the session (found by the mutation fuzz)."""
    g = helper.make_graph([helper.make_node("Einsum", ["x", ""], ["y"], equation="bdn,bdm->bnm")], "segv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "N"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "N", "M"])])
    return rewritten(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def endless() -> onnx.ModelProto:
    """A Loop with trip count 1e12 and a constant true condition: one onnxruntime run for hours."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.array([1.0], np.float32), "one")])
    g = helper.make_graph([helper.make_node("Loop", ["trip", "cond", "x"], ["y"], body=body)], "loop",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                          [numpy_helper.from_array(np.array(10**12, np.int64), "trip"), numpy_helper.from_array(np.array(True), "cond")])
    return rewritten(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def unrunnable() -> onnx.ModelProto:
    """Reshape [2,3] -> [4,5]: onnxruntime refuses to run it (an error, not a crash)."""
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "reshape",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])],
                          [numpy_helper.from_array(np.array([4, 5], np.int64), "s")])
    return rewritten(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def blow_up(k: int) -> onnx.ModelProto:
    """``x`` [1] expanded to Shape(x) * k elements and summed: a scalar output, ``4 k`` bytes in
    between that only a run finds out (no estimate is made for a model of static shapes)."""
    g = helper.make_graph([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mul", ["s", "k"], ["t"]),
                           helper.make_node("Expand", ["x", "t"], ["big"]), helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0)],
                          "blow_up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [numpy_helper.from_array(np.array([k], np.int64), "k")])
    return rewritten(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def squared_blow_up(k: int) -> onnx.ModelProto:
    """``x`` [1, L] -> L^2 * k zeros (ConstantOfShape), summed and added to x's sum: the count goes
    through Pow, which onnx's data propagation does not follow, so no estimate sizes it."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Pow", ["f", "two_f"], ["f2"]), helper.make_node("Cast", ["f2"], ["n"], to=TensorProto.INT64),
             helper.make_node("Slice", ["n", "one", "two"], ["n1"]), helper.make_node("Mul", ["n1", "k"], ["t"]),
             helper.make_node("ConstantOfShape", ["t"], ["big"]), helper.make_node("ReduceSum", ["big"], ["a"], keepdims=0),
             helper.make_node("ReduceSum", ["x"], ["b"], keepdims=0), helper.make_node("Add", ["a", "b"], ["y"])]
    consts = {"k": np.array([k], np.int64), "one": np.array([1], np.int64), "two": np.array([2], np.int64),
              "two_f": np.array(2.0, np.float32)}
    g = helper.make_graph(nodes, "squared_blow_up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "L"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                          [numpy_helper.from_array(v, name) for name, v in consts.items()])
    return rewritten(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def wide_output(n: int) -> onnx.ModelProto:
    """``x`` [1] expanded to ``n`` elements and added to x: ``8 n`` bytes live (two tensors), a
    ``4 n``-byte output, shapes static (no estimate is made)."""
    g = helper.make_graph([helper.make_node("Expand", ["x", "n"], ["big"]), helper.make_node("Add", ["big", "x"], ["y"])],
                          "wide_output", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], [numpy_helper.from_array(np.array([n], np.int64), "n")])
    return rewritten(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _save(m: onnx.ModelProto, path: Path) -> str:
    onnx.save(m, str(path))
    return str(path)


def _graphfix(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphfix", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (graphfix's onnxruntime worker)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# ---------------------------------------------------------------------------- one model
def test_onnxruntime_crash_is_one_line_naming_the_model_and_the_signal(tmp_path):
    src = _save(segfaulting(), tmp_path / "segv.onnx")
    proc = _graphfix(src, "out.onnx", "--quiet", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"graphfix: error: {src}: onnxruntime died of SIGSEGV"), proc.stderr
    assert "--no-verify" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["segv.onnx"]
    # what the line says is the way out
    assert _graphfix(src, "out.onnx", "--quiet", "--no-verify", cwd=tmp_path).returncode == 0


def test_endless_onnxruntime_run_is_stopped_by_the_time_budget(tmp_path):
    src = _save(endless(), tmp_path / "loop.onnx")
    start = time.monotonic()
    proc = _graphfix(src, "out.onnx", "--quiet", "--timeout", "1", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert time.monotonic() - start < 60
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "did not finish" in lines[0] and "within 1 s" in lines[0] and "--timeout" in lines[0], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.onnx"]


def test_a_blow_up_no_estimate_sizes_is_stopped_by_the_memory_budget(tmp_path):
    """A 1 GiB Expand in a run with --max-memory 64M: onnxruntime's allocation fails in the worker
    (its data may grow by the budget and no more) and the run ends in one line naming the budget;
    under the default budget the same model runs (the test's own cap, 8 GiB of address space, is
    the machine's safety net, not what stops it)."""
    src = _save(blow_up(1 << 28), tmp_path / "blow_up.onnx")

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    def graphfix_run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "graphfix", src, "out.onnx", "--quiet", *args], capture_output=True,
                              text=True, cwd=tmp_path, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=capped)

    proc = graphfix_run("--max-memory", "64M")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"graphfix: error: {src}: onnxruntime needed more than the memory budget of 64.0 MiB"), proc.stderr
    assert "--max-memory" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blow_up.onnx"]
    assert graphfix_run().returncode == 0


def test_a_candidate_shape_over_the_memory_budget_gives_way_to_the_next(tmp_path):
    """The shape search's lengths 16..128 make 64 MB to 4 GB of zeros that no estimate sees: each
    run stops at the budget in the worker and the search goes on to the ladder's 1 and 2 (before,
    it ran 64 MB and 256 MB at 16 and 32, over a 32M budget)."""
    src = _save(squared_blow_up(1 << 16), tmp_path / "squared.onnx")
    result = graphfix.fix(src, passes="fold-clip", max_memory="32M")
    assert result.report.shapes["shapes"] == [{"x": [1, 1]}, {"x": [1, 2]}] and result.report.shapes["tried"] == 6
    assert [p.name for p in result.report.passes if p.rewritten] == ["fold-clip"]


def test_a_run_well_inside_the_memory_budget_is_not_refused(tmp_path):
    """24 MiB live under --max-memory 32M runs: with onnxruntime's CPU arena its regions doubled up
    to what the limit left and the next plain allocation failed (a CI machine refused the 1 MB
    candidate of the test above); without it the budget measures the model's tensors."""
    src = _save(wide_output(3 << 20), tmp_path / "wide.onnx")
    result = graphfix.fix(src, passes="fold-clip", max_memory="32M")
    assert [p.name for p in result.report.passes if p.rewritten] == ["fold-clip"]
    assert result.report.status == "ok" and result.report.final["y"]["max_abs"] == 0


@pytest.mark.parametrize("sig,code,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_signal_ends_the_run_within_a_second_while_onnxruntime_computes(tmp_path, sig, code, word):
    src = _save(endless(), tmp_path / "loop.onnx")
    proc = subprocess.Popen([sys.executable, "-m", "graphfix", src, "out.onnx", "--report", "r.json"], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        for line in proc.stderr:  # phases are printed as they end: the probe run is the last one
            if line.startswith("graphfix: running passes"):
                break
        time.sleep(1.0)  # onnxruntime is inside the Loop now
        assert proc.poll() is None
        workers = _children(proc.pid)
        assert workers
        sent = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=10)
        took = time.monotonic() - sent
        rest = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code, rest
    assert took < 1.0, took
    assert f"graphfix: {word}" in rest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.onnx"]
    deadline = time.monotonic() + 5
    while not all(_gone(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(w) for w in workers)


def test_api_raises_onnxruntime_died_and_the_next_run_gets_a_new_worker(tmp_path):
    src = _save(segfaulting(), tmp_path / "segv.onnx")
    with pytest.raises(OnnxruntimeDied, match=r"segv\.onnx: onnxruntime died of SIGSEGV"):
        graphfix.fix(src, "all")
    result = graphfix.fix(str(DEMO), "all")
    assert result.report.sessions <= 4 and any(p.verdict == "kept" for p in result.report.passes)


def test_simplify_on_a_model_onnxruntime_cannot_run_is_refused_like_without_it(tmp_path):
    pytest.importorskip("onnxsim")
    src = _save(unrunnable(), tmp_path / "reshape.onnx")
    plain = _graphfix(src, "out.onnx", "--quiet", cwd=tmp_path)
    simplified = _graphfix(src, "out.onnx", "--quiet", "--simplify", cwd=tmp_path)
    assert plain.returncode == simplified.returncode == 2, simplified.stderr
    assert len(simplified.stderr.strip().splitlines()) == 1 and "internal error" not in simplified.stderr
    assert "--no-verify" in simplified.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "86401", "1e300"])
def test_timeout_out_of_range_is_refused_with_the_limit(tmp_path, value):
    proc = _graphfix(str(DEMO), "out.onnx", "--timeout", value, cwd=tmp_path)
    assert proc.returncode == 2 and "--timeout" in proc.stderr and "86400" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------- batches
def test_crashing_and_endless_models_in_a_batch_leave_the_others_written(tmp_path):
    (tmp_path / "out").mkdir()
    models = [str(DEMO), _save(segfaulting(), tmp_path / "segv.onnx"), _save(endless(), tmp_path / "loop.onnx")]
    (tmp_path / "last.onnx").write_bytes(DEMO.read_bytes())
    proc = _graphfix(*models, "last.onnx", "--out-dir", "out", "--quiet", "--timeout", "1", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["last.onnx", "superglue_matcher.onnx"]
    assert "segv.onnx: onnxruntime died of SIGSEGV" in proc.stderr and "loop.onnx: onnxruntime did not finish" in proc.stderr


def test_simplify_failure_in_a_batch_goes_on_to_the_next_model(tmp_path):
    pytest.importorskip("onnxsim")
    (tmp_path / "out").mkdir()
    proc = _graphfix(_save(unrunnable(), tmp_path / "reshape.onnx"), str(DEMO), "--out-dir", "out", "--quiet", "--simplify",
                     cwd=tmp_path)
    assert proc.returncode == 2 and "internal error" not in proc.stderr, proc.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["superglue_matcher.onnx"]


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_after_a_model_is_written_stops_the_batch(tmp_path, sig, code):
    (tmp_path / "out").mkdir()
    names = []
    for k in range(6):
        (tmp_path / f"m{k}.onnx").write_bytes(DEMO.read_bytes())
        names.append(f"m{k}.onnx")
    proc = subprocess.Popen([sys.executable, "-m", "graphfix", *names, "--out-dir", "out"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        for line in proc.stderr:
            if line.strip() == "wrote out/m1.onnx":
                proc.send_signal(sig)
                break
        proc.wait(timeout=60)
        rest = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code, rest
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written[:2] == ["m0.onnx", "m1.onnx"] and written in (["m0.onnx", "m1.onnx"], ["m0.onnx", "m1.onnx", "m2.onnx"]), written
    for name in written:  # whole models, no temp files
        onnx.checker.check_model(onnx.load(str(tmp_path / "out" / name)))


def test_external_data_in_a_batch_is_one_data_file_per_model(tmp_path):
    (tmp_path / "out").mkdir()
    for name, value in (("a", 1.0), ("b", 2.0)):
        w = numpy_helper.from_array(np.full((64, 64), value, np.float32), "w")
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / f"{name}.onnx"))
    proc = _graphfix("a.onnx", "b.onnx", "--out-dir", "out", "--external-data", "w.bin", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name, value in (("a", 1.0), ("b", 2.0)):
        m = onnx.load(str(tmp_path / "out" / f"{name}.onnx"))
        assert np.all(numpy_helper.to_array(m.graph.initializer[0]) == value), name
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.onnx", "a.w.bin", "b.onnx", "b.w.bin"]


# ---------------------------------------------------------------------------- the boundary
_DTYPES = st.sampled_from([np.float32, np.float16, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)), max_size=5), st.data())
def test_tensors_cross_the_boundary_unchanged(specs, data):
    arrays = [(f"t{k}", data.draw(hnp.arrays(dtype, shape))) for k, (dtype, shape) in enumerate(specs)]
    arrays.append(("text", np.array(["a", "bc"], dtype=object)))  # not plain memory: pickled with the message
    fd, layout, inline = runtime_worker.pack(arrays)
    got = runtime_worker.unpack(fd, layout, inline, [name for name, _ in arrays])
    assert list(got) == [name for name, _ in arrays]
    for name, want in arrays:
        assert got[name].dtype == want.dtype and got[name].shape == want.shape
        np.testing.assert_array_equal(got[name], want)
        if got[name].size and want.dtype.kind != "O":
            got[name].flat[0] = got[name].flat[0]  # writable (a private mapping)


def test_onnxruntime_errors_come_back_as_their_message():
    with pytest.raises(runtime_worker.RuntimeFailure, match="Reshape"):
        from graphfix.runtime import session as session_mod

        session_mod.session(unrunnable(), None).run(None, {"x": np.ones((2, 3), np.float32), "z": np.ones(1, np.float32)})


def test_no_session_of_the_users_model_opens_in_graphfix_itself(monkeypatch):
    """Verification, the shape search and the noise floor all run in the worker: with sessions
    forbidden in this process the demo is still verified in four sessions (only the cached probe of
    which IR version and opset onnxruntime reads loads a one-node model here)."""
    import onnxruntime

    from graphfix.onnxio.ir import runtime_limits

    runtime_limits()

    def forbidden(*args, **kwargs):
        raise AssertionError("an onnxruntime session in graphfix's own process")

    monkeypatch.setattr(onnxruntime, "InferenceSession", forbidden)
    result = graphfix.fix(str(DEMO), "all")
    assert result.report.sessions == 4 and any(p.verdict == "kept" for p in result.report.passes)
