"""float16/bfloat16 models: correct decompositions are kept, wrong ones are still rolled back.

The blocks are what onnxconverter-common's ``convert_float_to_float16(keep_io_types=True)`` makes
of a transformer MLP or a conv block: float32 input and output, float16 math between two Casts.
The float32 output carries float16 rounding; at float32's 1e-5 every exact norm/activation
decomposition in it was rolled back (gelu-decompose for a 2e-5 difference).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import graphfix
from graphfix import passes
from graphfix.graph import replace_tensor
from graphfix.passes.base import Context
from graphfix.report import summary
from graphfix.verify import compare, precision
from tests.helpers.support import ort_run, runs_on_onnxruntime

FP16_EPS = float(np.finfo(np.float16).eps)
#: what an fp16 computation may move by when a few of its ops round in another order
FP16_TOL = 4 * FP16_EPS

#: block kind -> (opset, the passes that must rewrite it)
KINDS = {
    "layernorm-gelu": (20, {"layernorm-decompose", "gelu-decompose"}),
    "layernorm-gelu-tanh": (20, {"layernorm-decompose", "gelu-decompose"}),
    "rmsnorm-gelu": (23, {"rmsnorm-decompose", "gelu-decompose"}),
    "layernorm-mish": (20, {"layernorm-decompose", "activation-decompose"}),
    "layernorm-hardswish": (20, {"layernorm-decompose", "activation-decompose"}),
    "layernorm-swish": (24, {"layernorm-decompose", "swish-decompose"}),
    "groupnorm-conv": (21, {"groupnorm-decompose"}),
    "swiglu": (28, {"swiglu-decompose"}),  # no SwiGLU in onnxruntime 1.32: verified on the reference evaluator
}


def fp16_block(kind: str, seed: int = 0) -> onnx.ModelProto:
    """x (float32) -> Cast(float16) -> [norm -> MatMul -> activation -> MatMul | norm -> SiLU -> Conv |
    MatMul, MatMul -> SwiGLU -> MatMul] -> Cast(float32)."""
    r = np.random.default_rng(seed)
    opset, _ = KINDS[kind]
    inits: list[onnx.TensorProto] = []

    def weight(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value).astype(np.float16), name))
        return name

    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16)]
    if kind == "groupnorm-conv":
        c = 16
        shape = [1, c, 4, 4]
        nodes += [helper.make_node("GroupNormalization", ["x16", weight("gs", 1 + 0.1 * r.standard_normal(c)),
                                                           weight("gb", 0.1 * r.standard_normal(c))], ["n"], num_groups=4, epsilon=1e-5),
                  helper.make_node("Sigmoid", ["n"], ["sg"]), helper.make_node("Mul", ["n", "sg"], ["a"]),
                  helper.make_node("Conv", ["a", weight("cw", r.standard_normal((c, c, 3, 3)) / 12)], ["y16"], pads=[1, 1, 1, 1])]
    elif kind == "swiglu":
        c, hidden = 32, 64
        shape = [1, 8, c]
        nodes += [helper.make_node("MatMul", ["x16", weight("wa", r.standard_normal((c, hidden)) / 6)], ["ga"]),
                  helper.make_node("MatMul", ["x16", weight("wb", r.standard_normal((c, hidden)) / 6)], ["gb"]),
                  helper.make_node("SwiGLU", ["ga", "gb"], ["a"]),
                  helper.make_node("MatMul", ["a", weight("w2", r.standard_normal((hidden, c)) / 8)], ["y16"])]
    else:
        c, hidden = 32, 64
        shape = [1, 8, c]
        norm, act = kind.split("-")[:2]
        scale = [weight("g", 1 + 0.1 * r.standard_normal(c))]
        if norm == "layernorm":
            nodes.append(helper.make_node("LayerNormalization", ["x16", *scale, weight("b", 0.1 * r.standard_normal(c))], ["n"],
                                          axis=-1, epsilon=1e-5))
        else:
            nodes.append(helper.make_node("RMSNormalization", ["x16", *scale], ["n"], axis=-1, epsilon=1e-5))
        op = {"gelu": "Gelu", "mish": "Mish", "hardswish": "HardSwish", "swish": "Swish"}[act]
        extra = {"approximate": "tanh"} if kind.endswith("tanh") else {}
        nodes += [helper.make_node("MatMul", ["n", weight("w1", r.standard_normal((c, hidden)) / 6)], ["h"]),
                  helper.make_node(op, ["h"], ["a"], **extra),
                  helper.make_node("MatMul", ["a", weight("w2", r.standard_normal((hidden, c)) / 8)], ["y16"])]
    nodes.append(helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT))
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    opsets = [helper.make_opsetid("", opset)]
    m = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_exact_decompositions_in_an_fp16_block_with_fp32_io_are_kept(kind):
    m = fp16_block(kind)
    result = graphfix.fix(m, passes="all")
    changed = {p.name: p for p in result.report.passes if p.rewritten}
    assert set(changed) == KINDS[kind][1], sorted(changed)
    assert all(p.verdict == "kept" and not p.rolled_back_nodes for p in changed.values()), [p.reason for p in changed.values()]
    assert result.report.status == "ok"
    assert result.report.precision == {"y": "float16"}
    assert "y computed in float16: compared at 4 units in that type's last place" in summary.table(result.report)
    x = np.random.default_rng(3).standard_normal([d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    run = ort_run if runs_on_onnxruntime(m) else (lambda model, feeds: ReferenceEvaluator(model).run(None, feeds))
    np.testing.assert_allclose(run(result.model, {"x": x})[0], run(m, {"x": x})[0], atol=FP16_TOL, rtol=FP16_TOL)


def _wrong_gelu(form: str) -> passes.Pass:
    """gelu-decompose with a wrong rewrite: the Erf formula plus 0.1, or the sigmoid approximation
    x * sigmoid(1.702 x) (within 2e-2 of Gelu: close, but not Gelu)."""

    def rewrite(node: gs.Node, ctx: Context) -> None:
        x, b = node.inputs[0], ctx.builder

        def c(v: float) -> gs.Constant:
            return b.const(np.array(v, np.float16))

        if form == "plus-0.1":
            erf = b.op("Erf", [b.op("Div", [x, c(np.sqrt(2.0))])])
            y = b.op("Add", [b.op("Mul", [b.op("Mul", [x, c(0.5)]), b.op("Add", [erf, c(1.0)])]), c(0.1)])
        else:
            y = b.op("Mul", [x, b.op("Sigmoid", [b.op("Mul", [x, c(1.702)])])])
        replace_tensor(ctx.graph, node.outputs[0], y)

    return dataclasses.replace(passes.get("gelu-decompose"), rewrite=rewrite)


@pytest.mark.parametrize("form", ["plus-0.1", "sigmoid-approximation"])
def test_a_wrong_rewrite_in_an_fp16_block_is_still_rolled_back(form):
    result = graphfix.fix(fp16_block("layernorm-gelu"), passes=[_wrong_gelu(form)])
    record = result.report.passes[0]
    assert record.rewritten == 1 and record.verdict == "rolled-back", record
    assert "outputs differ" in record.reason and result.report.status == "rolled-back"
    assert [n.op_type for n in result.model.graph.node].count("Gelu") == 1


def test_an_output_cast_to_float32_from_fp16_math_is_compared_at_fp16s_floor():
    assert precision.computed_in(fp16_block("layernorm-gelu")) == {"y": "float16"}
    assert compare.tolerances(np.float32, 1e-5, 1e-5, "float16") == (FP16_TOL, FP16_TOL)
    assert compare.tolerances(np.float32, 1e-5, 1e-5, None) == (1e-5, 1e-5)  # float32 math: exactly as asked
    assert compare.tolerances(np.float32, 1e-5, 1e-5, "bfloat16") == (4 * 2.0**-7, 4 * 2.0**-7)


def test_bfloat16_on_the_way_makes_a_float32_output_bfloat16_precision():
    """onnxruntime's CPU provider has bfloat16 kernels for Cast, Identity, Transpose and
    LayerNormalization only (1.32), and graphfix's norm/activation passes leave bfloat16 alone, so
    a bfloat16 island is what a model run here carries: the outputs after it are compared at
    bfloat16's floor, those that do not depend on it at float32's."""
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("Transpose", ["xb"], ["tb"], perm=[1, 0]),
             helper.make_node("Cast", ["tb"], ["t"], to=TensorProto.FLOAT),
             helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    g = helper.make_graph(nodes, "bf16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    y = ort_run(m, {"x": x})[0]  # runs on the CPU provider
    assert precision.computed_in(m) == {"y": "bfloat16"}
    moved = y * (1 + 2.0**-8)  # half a bfloat16 ulp: rounding, not a wrong rewrite
    ref, cand = compare.RunResults(), compare.RunResults()
    from polygraphy.comparator.struct import IterationResult
    ref.append(("a", [IterationResult({"y": y, "z": y})]))
    cand.append(("b", [IterationResult({"y": moved, "z": moved})]))
    diffs = compare.compare(ref, cand, 1e-5, 1e-5, precision={"y": "bfloat16"})
    assert diffs["y"].passed and diffs["y"].precision == "bfloat16"
    assert not diffs["z"].passed  # float32 math: 1e-5 as before
