"""Test helpers: run onnxruntime before/after a pass, collect fixtures and ONNX node test cases."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort

from graphfix import passes
from graphfix.graph import to_graph
from graphfix.onnxio.ir import runtime_compatible, runtime_limits
from graphfix.passes.base import Context, PassResult
from graphfix.verify.inputs import make_inputs

#: Newest default-domain opset the installed onnxruntime loads (asked of it; node test cases are newer).
ORT_MAX_OPSET = runtime_limits()[1]


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(runtime_compatible(model).SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: np.asarray(v) for k, v in feeds.items() if k in names})


def runs_on_onnxruntime(model: onnx.ModelProto) -> bool:
    """onnxruntime implements every op of the model (1.32 has no opset-28 SwiGLU)."""
    try:
        ort.InferenceSession(runtime_compatible(model).SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - NOT_IMPLEMENTED and the like
        return False
    return True


def remaining_matches(model: onnx.ModelProto, pass_name: str) -> list[str]:
    """Names of nodes the pass would still match (must be empty after the pass)."""
    p = passes.get(pass_name)
    graph = to_graph(model)
    from graphfix.analysis.fold import Folder
    from graphfix.graph import Builder

    ctx = Context(graph, Builder(graph), Folder(graph))
    return [f"{n.op}:{n.name}" for n in graph.nodes if p.match(n, ctx)]


def assert_outputs_match(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], atol: float = 1e-6, rtol: float = 1e-6) -> None:
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual, strict=True):
        assert e.dtype == a.dtype, (e.dtype, a.dtype)
        assert e.shape == a.shape, (e.shape, a.shape)
        if e.dtype.kind in "biu":
            np.testing.assert_array_equal(a, e)
        else:
            np.testing.assert_allclose(a, e, atol=atol, rtol=rtol)


def check_rewrite(
    model: onnx.ModelProto,
    pass_name: str,
    feeds: dict[str, np.ndarray] | None = None,
    atol: float = 1e-6,
    rtol: float = 1e-6,
    expect_rewrite: bool = True,
    **apply_kw: object,
) -> PassResult:
    """Run one pass; assert it rewrote, left no match, kept a valid model and onnxruntime outputs."""
    p = passes.get(pass_name)
    if feeds is None:
        feeds = make_inputs(model)[0]
    before = ort_run(model, feeds)
    result = p.apply(model, **apply_kw)
    if expect_rewrite:
        assert result.rewritten > 0, f"{pass_name} rewrote nothing: {result.findings}"
        assert remaining_matches(result.model, pass_name) == []
    onnx.checker.check_model(runtime_compatible(result.model), full_check=True)
    assert_outputs_match(before, ort_run(result.model, feeds), atol, rtol)
    assert [i.name for i in result.model.graph.input] == [i.name for i in model.graph.input]
    assert [o.name for o in result.model.graph.output] == [o.name for o in model.graph.output]
    return result


@functools.cache
def _all_node_cases() -> tuple:
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(node_cases.collect_testcases())


def node_cases(op_type: str) -> list:
    """The official ONNX node test cases whose model is a single ``op_type`` node."""
    return [c for c in _all_node_cases() if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type == op_type]


def runnable(model: onnx.ModelProto, min_opset: int) -> onnx.ModelProto:
    """Case models use the newest opset; onnxruntime implements up to ORT_MAX_OPSET."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > ORT_MAX_OPSET:
            imp.version = max(min_opset, ORT_MAX_OPSET)
    m.ir_version = min(m.ir_version, max(onnx.helper.find_min_ir_version_for(list(m.opset_import)), 7), runtime_limits()[0])
    return m


def case_feeds(model: onnx.ModelProto, inputs: Sequence) -> dict[str, np.ndarray]:
    """Feeds for a node test case's data set (scalars as 0-d arrays, empty optional names skipped)."""
    names = [vi.name for vi in model.graph.input]
    return {n: np.asarray(x) for n, x in zip(names, inputs, strict=False) if n}


def freeze_inputs(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Turn graph inputs into initializers (node test cases feed attribute-like values, e.g. a
    CumSum axis or Pad pads, as inputs; exports have them as constants)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [vi for vi in m.graph.input if vi.name not in values]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.extend(onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in values.items())
    return m


def check_scatter_node_case(case, frozen: bool, pass_name: str) -> None:
    """An official Scatter* node case through ``pass_name``, its indices as a runtime input or
    frozen into an initializer (exports have both): rewritten, and equal to the expected output."""
    op = case.model.graph.node[0].op_type
    for inputs, expected in case.data_sets:
        feeds = case_feeds(case.model, inputs)
        m = runnable(case.model, 18)
        if frozen:
            m = freeze_inputs(m, {"indices": feeds.pop("indices")})
        result = check_rewrite(m, pass_name, feeds)
        assert op not in [n.op_type for n in result.model.graph.node]
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)


def check_fixture(fx, pass_name: str, atol: float = 1e-6, rtol: float = 1e-6, seed: int = 0) -> PassResult:
    """A fixture reproduces its pattern, and the pass rewrites it with equal onnxruntime outputs."""
    m = fx.build()
    assert remaining_matches(m, pass_name), "the fixture must reproduce the pattern"
    feeds = make_inputs(m, fx.input_shapes, fx.val_range, seed=seed)[0]
    return check_rewrite(m, pass_name, feeds, atol, rtol)


def check_node_case(case, pass_name: str, min_opset: int, atol: float, rtol: float, freeze: Sequence[str] = (),
                    **apply_kw: object) -> None:
    """An official node case through ``pass_name`` (``freeze``: inputs made initializers, as exports
    have them): rewritten, the op gone, outputs equal to onnxruntime's on the original where it runs
    the op, and to the case's expected outputs."""
    op = case.model.graph.node[0].op_type
    m = runnable(case.model, min_opset)
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        frozen = freeze_inputs(m, {k: feeds.pop(k) for k in freeze}) if freeze else m
        if runs_on_onnxruntime(frozen):
            result = check_rewrite(frozen, pass_name, feeds, atol, rtol, **apply_kw)
        else:
            result = passes.get(pass_name).apply(frozen, **apply_kw)
            assert result.rewritten and remaining_matches(result.model, pass_name) == []
        assert op not in [n.op_type for n in result.model.graph.node]
        for got, want in zip(ort_run(result.model, feeds), expected, strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol)


def frozen_case_runs(case, min_opset: int, data: str) -> list[tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]]:
    """A node test case's data sets with every input but ``data`` made an initializer (frame steps,
    lengths, axes and windows are constants in exports): (model, feeds, expected output 0) each."""
    m = runnable(case.model, min_opset)
    runs = []
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        consts = {k: feeds.pop(k) for k in list(feeds) if k != data}
        runs.append((freeze_inputs(m, consts), feeds, expected[0]))
    return runs
