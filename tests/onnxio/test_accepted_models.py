"""What onnxruntime runs, graphfix does not refuse (issue 31 item 1): declared dims of -1 or 0,
onnxruntime's contrib ops in the ONNX domain, opset imports of domains no node uses. What onnx's
checker alone complains about is a note; the model is rewritten and verified as any other, on
both load paths (checks here, or in the worker beside the import of a big graph)."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

import graphfix
from graphfix.onnxio.load import load_model
from graphfix.pipeline import load_checks
from tests.helpers.cli_runs import refused, run, save
from tests.helpers.producers import (
    UNUSED_DOMAINS,
    declared_dim_model,
    simplified_layernorm_model,
    unused_domains_model,
)


@pytest.fixture(params=["here", "worker"])
def load_path(request, monkeypatch):
    """Run each test with the load checks here and in the worker (every graph counts as big)."""
    monkeypatch.setattr(load_checks, "OFFLOAD_NODES", 1 if request.param == "worker" else 10**9)
    return request.param


def _fixed(m: onnx.ModelProto, tmp_path, capfd, *extra: str) -> tuple[dict, onnx.ModelProto]:
    src = save(m, tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / "out.onnx", "--quiet", "--report", tmp_path / "r.json", *extra], capfd)
    assert rc == 0, err
    return json.loads((tmp_path / "r.json").read_text()), onnx.load(str(tmp_path / "out.onnx"))


def _verified(report: dict, *lowered: str) -> None:
    """fold-weights rewrote the computed axes (and ``lowered`` the contrib ops), and verification
    compared the outputs on non-empty inputs."""
    assert [p["name"] for p in report["passes"] if p.get("rewritten")] == [*lowered, "fold-weights"]
    assert report["final"] and all(v["passed"] for v in report["final"].values()), report["final"]
    for shapes in report["shapes"]["shapes"]:
        assert all(0 not in dims for dims in shapes.values()), report["shapes"]


@pytest.mark.parametrize("value", [-1, 0, -3])
@pytest.mark.parametrize("where", ["input", "value_info"])
def test_declared_dims_below_one_are_read_as_dynamic_and_kept(value, where, load_path, tmp_path, capfd):
    report, fixed = _fixed(declared_dim_model(value, where), tmp_path, capfd, "--passes", "all")
    _verified(report)
    kind = "input 'x'" if where == "input" else "value 'r'"
    assert any(note.startswith(f"{kind} (axis 0) declares") and "as dynamic" in note for note in report["notes"]), report["notes"]
    infos = {vi.name: vi for vi in (*fixed.graph.input, *fixed.graph.value_info)}
    name = "x" if where == "input" else "r"
    if name in infos:  # a rewritten model's value_info is graphfix's own (the export writes none here)
        declared = infos[name].type.tensor_type.shape.dim[0]
        assert declared.HasField("dim_value") and declared.dim_value == value  # the user's declaration, written back
    assert where != "input" or name in infos


def test_an_api_users_model_is_not_changed(tmp_path):
    m = declared_dim_model(-1)
    before = m.SerializeToString()
    result = graphfix.fix(m, passes="all")
    assert m.SerializeToString() == before
    assert result.model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1


def test_load_model_clears_them_for_graphfix_and_check(tmp_path):
    loaded = load_model(save(declared_dim_model(0), tmp_path / "in.onnx"))
    dim = loaded.graph.input[0].type.tensor_type.shape.dim[0]
    assert not dim.HasField("dim_value") and not dim.dim_param


def test_onnx_domain_contrib_op_is_a_note_and_the_model_is_verified(load_path, tmp_path, capfd):
    report, fixed = _fixed(simplified_layernorm_model(), tmp_path, capfd, "--passes", "all")
    _verified(report, "contrib-norm-lower")  # loaded, verified, and lowered (issue 32)
    assert any("SimplifiedLayerNormalization" in n and "onnx.checker" in n for n in report["notes"]), report["notes"]
    assert "SimplifiedLayerNormalization" not in [n.op_type for n in fixed.graph.node]
    assert "com.microsoft" not in {o.domain for o in fixed.opset_import}  # the checker's copy only


def test_unused_domain_imports_are_a_note(load_path, tmp_path, capfd):
    report, fixed = _fixed(unused_domains_model(), tmp_path, capfd, "--passes", "all")
    _verified(report)
    assert any(n.startswith("the model imports domain(s) no node uses (" + ", ".join(UNUSED_DOMAINS)) for n in report["notes"])
    assert [o.domain for o in fixed.opset_import][1:] == list(UNUSED_DOMAINS)


def test_an_op_no_runtime_knows_is_still_refused(load_path, tmp_path, capfd):
    """The checker's "No Op registered" stays a refusal for an op onnxruntime does not run either."""
    m = simplified_layernorm_model()
    m.graph.node[-1].op_type = "SimplifiedLayerNormalisation"
    src = save(m, tmp_path / "in.onnx")
    refused([src, tmp_path / "out.onnx"], capfd, tmp_path, ("in.onnx", "No Op registered for SimplifiedLayerNormalisation"))


def test_the_onnx_domain_contrib_list_is_the_installed_onnxruntimes():
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    from graphfix.onnxio import domains

    standard = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == ""}
    registered = {s.name for s in C.get_all_operator_schema() if s.domain in ("", "ai.onnx")}
    assert registered - standard == domains.ORT_ONNX_DOMAIN_OPS


def test_contrib_ops_in_a_subgraph_are_checked_too(tmp_path):
    """An If branch holding SimplifiedLayerNormalization (a merged decoder's)."""
    from graphfix.onnxio import domains

    inner = simplified_layernorm_model().graph
    branch = helper.make_graph(list(inner.node), "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])],
                               list(inner.initializer))
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y2"])], "else", [],
                              [helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2, 4, 8])])
    g = helper.make_graph([helper.make_node("If", ["cond"], ["out"], then_branch=branch, else_branch=other)], "g",
                          [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert domains.onnx_domain_contrib_ops(m) == ["SimplifiedLayerNormalization"]
    loaded = load_model(save(m, tmp_path / "in.onnx"))
    assert loaded.graph.node[0].op_type == "If"
