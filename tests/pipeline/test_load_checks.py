"""A big graph's onnx.checker and shape inference run in graphfix's worker beside its load and
import: the same written model, the same refusals in the same order, and the worker free again."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphfix
from graphfix.errors import GraphfixError
from graphfix.graph.convert import infer
from graphfix.onnxio import external as external_mod
from graphfix.onnxio.infer import infos_from_bytes, value_infos
from graphfix.onnxio.proto import weightless
from graphfix.pipeline import load_checks
from graphfix.runtime import worker as runtime_worker
from tests.helpers.cli_runs import ROOT, external_model, refused, save


def chain(blocks: int = 3) -> onnx.ModelProto:
    """MatMul -> Clip with a computed bound (Constant -> Cast), which fold-clip rewrites."""
    nodes, inits, x = [], [], "x"
    for k in range(blocks):
        inits.append(numpy_helper.from_array(np.full((4, 4), 0.1 * (k + 1), np.float32), f"w{k}"))
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"m{k}"], name=f"mm{k}"),
                  helper.make_node("Constant", [], [f"lo{k}"], value=numpy_helper.from_array(np.array(-1.0, np.float64))),
                  helper.make_node("Cast", [f"lo{k}"], [f"lof{k}"], to=TensorProto.FLOAT),
                  helper.make_node("Clip", [f"m{k}", f"lof{k}"], [f"y{k}"], name=f"clip{k}")]
        x = f"y{k}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def sent(monkeypatch):
    """Every graph counts as big; the list holds each request sent to the worker."""
    calls = []
    real = runtime_worker.check_and_infer

    def spy(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(load_checks, "OFFLOAD_NODES", 1)
    monkeypatch.setattr(runtime_worker, "check_and_infer", spy)
    return calls


def _written(src, out, **kwargs) -> bytes:
    graphfix.fix(str(src), output=str(out), **kwargs)
    return out.read_bytes()


@pytest.mark.parametrize("verify", [False, True])
def test_worker_checked_run_writes_the_same_model(verify, sent, monkeypatch, tmp_path):
    src = save(chain(), tmp_path / "in.onnx")
    offloaded = _written(src, tmp_path / "a.onnx", verify=verify)
    assert len(sent) == 1  # the check went to the worker
    monkeypatch.setattr(load_checks, "OFFLOAD_NODES", 10**9)
    assert _written(src, tmp_path / "b.onnx", verify=verify) == offloaded
    assert len(sent) == 1  # and the second run checked here
    assert "Clip" in {n.op_type for n in onnx.load(str(tmp_path / "a.onnx")).graph.node}


def test_weightless_checker_input_is_derived_in_the_worker(sent, monkeypatch, tmp_path):
    """Above the checker's 64 MB line the worker builds the stub-data model itself."""
    monkeypatch.setattr(load_checks, "checks_weightless", lambda model: True)
    src = save(chain(), tmp_path / "in.onnx")
    graphfix.fix(str(src), output=str(tmp_path / "out.onnx"), verify=False)
    assert sent[0][1] == (None, True)


def _dangling() -> onnx.ModelProto:
    """A node reads a tensor nothing provides: graphfix's own walk lets it through, the checker does not."""
    m = chain()
    m.graph.node[0].input[0] = "nowhere"
    return m


def test_checker_complaint_from_the_worker_reads_as_at_load(sent, monkeypatch, tmp_path, capfd):
    src = save(_dangling(), tmp_path / "in.onnx")
    line = refused([src, tmp_path / "out.onnx", "--no-verify"], capfd, tmp_path, ("in.onnx", "reads 'nowhere'"))
    assert len(sent) == 1
    monkeypatch.setattr(load_checks, "OFFLOAD_NODES", 10**9)
    assert refused([src, tmp_path / "out.onnx", "--no-verify"], capfd, tmp_path, "reads 'nowhere'") == line


def test_checker_complaint_comes_before_a_later_refusal(sent, tmp_path):
    """A run refused after the load (here: an unknown pass name is checked at run time by the API's
    pipeline) says the checker's complaint, as load_model would have first."""
    with pytest.raises(GraphfixError, match="reads 'nowhere'"):
        graphfix.fix(_dangling(), passes=[graphfix.passes.get("fold-clip")], trt="no-such-release", verify=False)
    assert len(sent) == 1


def test_load_problem_comes_first_and_frees_the_worker(sent, tmp_path, capfd):
    m = chain()
    m.graph.initializer[0].dims[0] = 5  # its data holds 16 elements, not 20
    src = save(m, tmp_path / "in.onnx")
    refused([src, tmp_path / "out.onnx", "--no-verify"], capfd, tmp_path, "holds data for a different count")
    assert len(sent) == 1  # sent before the walk over the nodes found it, and cancelled
    worker = runtime_worker._WORKER
    assert worker is None or worker.pending is None or not worker.pending.open
    good = save(chain(), tmp_path / "good.onnx")
    graphfix.fix(str(good), output=str(tmp_path / "out.onnx"), verify=True)  # the worker serves again


def test_request_while_an_answer_is_pending_is_an_error_not_a_hang(tmp_path):
    model = chain()
    pending = runtime_worker.check_and_infer(model.SerializeToString(), (model.SerializeToString(), False))
    try:
        with pytest.raises(RuntimeError, match="not taken yet"):
            runtime_worker.simplify(model.SerializeToString())
        problem, inferred = runtime_worker.checked_and_inferred(pending)
        assert problem is None and inferred is not None
        assert not pending.open
    finally:
        pending.cancel()


@pytest.mark.parametrize("fixture", ["if_inline", "fold_clip"])
def test_worker_infers_what_inference_here_finds(fixture):
    """Subgraphs' value_infos included (an If's branches), in the same order, the first name winning."""
    for path in sorted((ROOT / "fixtures" / fixture).glob("*.onnx"))[:3]:
        model = onnx.load(str(path))
        here = value_infos(infer(model))
        pending = runtime_worker.check_and_infer(weightless(model).SerializeToString(), (model.SerializeToString(), False))
        _, found = runtime_worker.checked_and_inferred(pending)
        there = infos_from_bytes(found)
        assert list(there) == list(here)
        assert [v.SerializeToString() for v in there.values()] == [v.SerializeToString() for v in here.values()]


def test_without_a_worker_the_checks_run_here(sent, monkeypatch, tmp_path, capfd):
    """A worker that cannot be started (no processes left) costs the overlap, not the run."""
    def no_process(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    runtime_worker.shutdown()
    monkeypatch.setattr(runtime_worker.subprocess, "Popen", no_process)
    src = save(chain(), tmp_path / "in.onnx")
    graphfix.fix(str(src), output=str(tmp_path / "out.onnx"), verify=False)
    assert len(sent) == 1 and (tmp_path / "out.onnx").exists()
    refused([save(_dangling(), tmp_path / "bad.onnx"), tmp_path / "out2.onnx", "--no-verify"], capfd, tmp_path, "reads 'nowhere'")


def test_another_threads_request_waits_for_the_answer_then_runs():
    model = chain()
    pending = runtime_worker.check_and_infer(model.SerializeToString(), (model.SerializeToString(), False))
    done = []
    other = threading.Thread(target=lambda: done.append(
        runtime_worker.open_session(model.SerializeToString(), [], [], None, True).run_named({"x": np.ones((1, 4), np.float32)})))
    other.start()
    other.join(0.5)
    assert other.is_alive() and not done  # waiting for the worker, not refused
    runtime_worker.checked_and_inferred(pending)
    other.join(60)
    assert len(done) == 1 and list(done[0]) == ["y2"]


def test_worker_dying_on_the_checks_is_one_line(sent, tmp_path):
    """onnx's C++ aborting in the worker (here: the worker killed) ends the run with one line."""
    runtime_worker.start(runtime=False)
    worker = runtime_worker._WORKER.proc
    os.kill(worker.pid, signal.SIGSTOP)  # it cannot answer before it dies
    checks = load_checks.LoadChecks(str(tmp_path / "in.onnx"), offload=True)
    checks.submit(chain())
    worker.kill()
    with pytest.raises(GraphfixError, match="onnx.checker or shape inference failed on it .*SIGKILL"):
        checks.infos()
    assert not checks.pending.open


def _runtime_loaded() -> bool:
    """Whether the worker process has onnxruntime's library mapped."""
    return "onnxruntime_pybind11_state" in Path(f"/proc/{runtime_worker._WORKER.proc.pid}/maps").read_text()


@pytest.mark.parametrize("runtime", [False, True])
def test_worker_imports_onnxruntime_at_start_only_when_sessions_follow(runtime):
    """A worker started for verification imports onnxruntime while the model loads; one started
    for a big graph's checks only on its first session."""
    runtime_worker.shutdown()
    runtime_worker.start(runtime=runtime)
    model = chain()
    runtime_worker.checked_and_inferred(runtime_worker.check_and_infer(model.SerializeToString(), (model.SerializeToString(), False)))
    assert _runtime_loaded() == runtime
    runtime_worker.open_session(model.SerializeToString(), [], [], None, True)
    assert _runtime_loaded()


def test_model_with_external_data_sends_its_own_checker_input(sent, monkeypatch, tmp_path):
    """External data: the stub-data model is built here (its small external tensors are stubs too)."""
    monkeypatch.setattr(external_mod, "LOAD_SMALL_BELOW", 0)  # the weights stay external
    src = external_model(tmp_path / "m")
    for run in ("a", "b"):  # the same name in two folders: the data file's name is in the model
        (tmp_path / run).mkdir()
    offloaded = _written(src, tmp_path / "a" / "out.onnx", verify=False)
    assert sent[0][1][0] is not None and sent[0][1][1] is True
    monkeypatch.setattr(load_checks, "OFFLOAD_NODES", 10**9)
    assert _written(src, tmp_path / "b" / "out.onnx", verify=False) == offloaded
    assert (tmp_path / "a" / "out.onnx.data").read_bytes() == (tmp_path / "b" / "out.onnx.data").read_bytes()
