"""`graphfix check` knows every operator of the installed onnx's newest opset, says which releases
it has no information for, and tells what to change in the export where no rewrite exists."""

from __future__ import annotations

import warnings

import onnx
import pytest
from onnx import defs, helper

import graphfix
from fixtures.make_fixtures import all_fixtures
from graphfix.check.findings import check_model
from graphfix.trt import support
from tests.helpers.support import node_cases

NEWEST = defs.onnx_opset_version()
OPS = sorted({s.name for s in defs.get_all_schemas_with_history() if s.domain == "" and s.since_version <= NEWEST
              and not s.deprecated})
#: Documented releases, one undocumented between two (10.7), and one newer than any document (12.0).
RELEASES = ["7.0", "8.6", "10.1", "10.7", "10.14", "10.15", "11.0", "11.1", "12.0"]
NO_REWRITE = ("BitCast", "LinearAttention")


def _one_node(op: str) -> onnx.ModelProto:
    schema = defs.get_schema(op, NEWEST)
    names = [f"i{k}" for k, f in enumerate(schema.inputs) if f.option != defs.OpSchema.FormalParameterOption.Optional]
    graph = helper.make_graph([helper.make_node(op, names, ["y"], name=f"the_{op}")], "g",
                              [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in names],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", NEWEST)])


def test_every_operator_of_the_newest_opset_has_data():
    assert NEWEST >= 28 and {"SwiGLU", "CumProd", "BitCast"} <= set(OPS)
    missing = [op for op in OPS if op not in support.data()["ops"]]
    assert missing == []


@pytest.mark.parametrize("op", OPS)
def test_check_answers_for_every_operator_and_release(op):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for trt in RELEASES:
            release = support.resolve(trt)
            entry = support.op_support(op, release)
            findings = [f for f in check_model(_one_node(op), trt).findings if f.node == f"the_{op}" and f.rule == "no-importer"]
            if entry is None or not entry.supported:
                assert findings and findings[0].severity == "blocking", (op, trt)
                unknown = support.unknown_for(op, release)
                assert (unknown is not None) == ("no information" in findings[0].message), (op, trt)
                assert findings[0].certain == (unknown is None)
            else:
                assert not findings, (op, trt)


def test_undocumented_releases_say_so():
    swiglu = _one_node("SwiGLU")
    newer = [f for f in check_model(swiglu, "12.0").findings if f.op == "SwiGLU"][0]
    assert "no information on SwiGLU for TensorRT 12.0" in newer.message and newer.fix_pass == "swiglu-decompose"
    between = [f for f in check_model(swiglu, "10.7").findings if f.op == "SwiGLU"][0]
    assert "no information" not in between.message  # 10.6 and 10.8 both lack it
    rms = _one_node("RMSNormalization")
    assert [f for f in check_model(rms, "10.15.1").findings if f.op == "RMSNormalization"] == []
    assert support.unknown_for("RMSNormalization", support.resolve("10.14.1")) is not None  # 10.14 lacks it, 10.15 has it


@pytest.mark.parametrize("op", NO_REWRITE)
@pytest.mark.parametrize("trt", ["8.6", "10.1", "10.7", "11.1"])
def test_ops_without_a_rewrite_say_what_to_change_in_the_export(op, trt):
    cases = node_cases(op)
    assert cases, op
    for case in cases[:3]:
        found = [f for f in check_model(case.model, trt).findings if f.op == op]
        assert len(found) == 1 and found[0].severity == "blocking" and found[0].fix_pass is None
        assert "no graphfix rewrite" in found[0].message or "no exact rewrite" in found[0].message
        assert "export" in found[0].message and found[0].remedy == "no rewrite: change the export"


NEW_OPS = {"RMSNormalization", "RotaryEmbedding", "TensorScatter", "Swish", "SwiGLU", "CumProd", "CausalConvWithState"}
GROUPS = ("rmsnorm_decompose", "rotary_embedding_decompose", "tensorscatter_decompose", "swish_decompose",
          "swiglu_decompose", "cumprod_decompose", "causalconv_decompose")
NEW_FIXTURES = [fx for group, fx in all_fixtures() if group in GROUPS]


@pytest.mark.parametrize("trt", ["8.6", "10.1", "10.7"])
@pytest.mark.parametrize("fx", NEW_FIXTURES, ids=lambda fx: fx.name)
def test_auto_leaves_none_of_the_new_operators(fx, trt):
    """Every fixture of the seven passes, `--passes auto --trt V`: rewritten, verified (SwiGLU on the
    ONNX reference evaluator), nothing blocking left."""
    result = graphfix.fix(fx.build(), "auto", trt=trt, input_shapes=fx.input_shapes, val_range=fx.val_range)
    assert result.report.passes and all(p.verdict == "kept" for p in result.report.passes), \
        [(p.name, p.verdict, p.reason) for p in result.report.passes]
    assert not NEW_OPS & {n.op_type for n in result.model.graph.node}
    assert not [f for f in check_model(result.model, trt).findings if f.severity == "blocking"]
