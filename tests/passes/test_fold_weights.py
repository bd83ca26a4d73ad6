"""fold-weights: fixtures, ONNX node cases with computed weights, version boundaries, random Conv kernels."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import FLOAT, FLOAT16, INT64, const, init, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import check_model
from graphfix.graph import to_graph
from graphfix.passes import fold_weights
from graphfix.verify.inputs import make_inputs
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    node_cases,
    ort_run,
    remaining_matches,
    runnable,
)

PASS = "fold-weights"
FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "fold_weights"}
REWRITTEN = [fx for fx in FIXTURES.values() if not fx.finding]


def _initializer_names(m: onnx.ModelProto) -> set[str]:
    return {t.name for t in m.graph.initializer}


def _weights_names(m: onnx.ModelProto) -> set[str]:
    """What TensorRT calls weights: initializers and Constant outputs."""
    return _initializer_names(m) | {n.output[0] for n in m.graph.node if n.op_type == "Constant"}


def _weights_inputs(m: onnx.ModelProto) -> list[tuple[str, int, str]]:
    """(node, index, input name) of every input the pass's families name, for the model's opset."""
    graph = to_graph(m)
    found = []
    for n in graph.nodes:
        for family, _ in fold_weights.FAMILIES:
            if n.op in family.ops:
                found += [(n.name, k, n.inputs[k].name) for k in family.inputs(n, graph.opset) if k < len(n.inputs) and n.inputs[k].name]
    return found


# ------------------------------------------------------------------ fixtures
@pytest.mark.parametrize("fx", REWRITTEN, ids=lambda fx: fx.name)
def test_fixture_folded_and_equal(fx):
    result = check_fixture(fx, PASS, atol=1e-5, rtol=1e-5, seed=3)
    names = _weights_names(result.model)
    assert all(name in names for _, _, name in _weights_inputs(result.model))
    assert [n.op_type for n in result.model.graph.node if n.op_type in fold_weights.PASS.ops]  # the op itself stays


def test_fixture_ops_are_kept_and_chains_dropped():
    result = check_rewrite(FIXTURES["conv_gaussian_kernel"].build(), PASS)
    assert [n.op_type for n in result.model.graph.node] == ["Conv"]


def test_dtype_is_kept_fp16():
    result = check_rewrite(FIXTURES["conv_autocast_fp16"].build(), PASS, make_inputs(FIXTURES["conv_autocast_fp16"].build())[0])
    inits = {t.name: t for t in result.model.graph.initializer}
    conv = next(n for n in result.model.graph.node if n.op_type == "Conv")
    assert [inits[i].data_type for i in conv.input[1:]] == [onnx.TensorProto.FLOAT16] * 2


def test_one_initializer_per_computed_tensor():
    result = check_rewrite(FIXTURES["unsqueeze_cast_axes"].build(), PASS)
    axes = {n.input[1] for n in result.model.graph.node if n.op_type in ("Squeeze", "Unsqueeze")}
    assert len(axes) == 1 and axes <= _initializer_names(result.model)


def test_runtime_kernel_is_a_finding_naming_the_path():
    result = passes.get(PASS).apply(FIXTURES["conv_dynamic_kernel"].build())
    assert result.rewritten == 0 and len(result.findings) == 1
    assert "graph input 'k_int' -> Cast '/Cast_k'" in result.findings[0].message


def test_dynamic_dims_are_a_finding():
    m = model(
        [node("Shape", ["x"], ["s"]), const("i1", [1], np.int64), node("Gather", ["s", "i1"], ["c"], axis=0),
         node("ConstantOfShape", ["c"], ["ones"], value=onnx.numpy_helper.from_array(np.array([1.0], np.float32))),
         node("ConstantOfShape", ["c"], ["zeros"]),
         node("InstanceNormalization", ["x", "ones", "zeros"], ["y"], name="/IN")],
        [inp("x", FLOAT, ["n", "c", "h"])], [out("y", FLOAT, ["n", "c", "h"])],
    )
    result = passes.get(PASS).apply(m)
    assert result.rewritten == 0
    assert "the dynamic dims of 'x' -> Shape '/Shape_s' -> Gather '/Gather_c' -> ConstantOfShape" in result.findings[0].message


def test_size_limit_is_a_finding(monkeypatch):
    monkeypatch.setattr(fold_weights, "WEIGHTS_MAX_ELEMENTS", 100)
    result = passes.get(PASS).apply(FIXTURES["conv_weight_norm"].build())
    assert result.rewritten == 0 and "exceeds 100 elements" in result.findings[0].message


def test_inputs_already_weights_are_left_alone():
    m = model([const("k", [2], np.int64), node("TopK", ["x", "k"], ["v", "i"])], [inp("x", FLOAT, [5])],
              [out("v", FLOAT, [2]), out("i", INT64, [2])])
    assert remaining_matches(m, PASS) == []


def test_dequantized_conv_weights_are_left_alone():
    """QAT exports: W = DequantizeLinear(int8 weights) is what TensorRT's Q/DQ conv path expects."""
    m = model(
        [node("DequantizeLinear", ["wq", "scale", "zp"], ["w"], axis=0), node("Conv", ["x", "w"], ["y"])],
        [inp("x", FLOAT, [1, 2, 4, 4])], [out("y", FLOAT, [1, 3, 4, 4])],
        [init("wq", np.ones((3, 2, 1, 1), np.int8)), init("scale", np.full(3, 0.1, np.float32)), init("zp", np.zeros(3, np.int8))],
        opset=13,
    )
    assert remaining_matches(m, PASS) == []


# ------------------------------------------------------------ version boundaries
#: fixture, release inside the rule's range, release just outside it
BOUNDARIES = [
    ("instancenorm_cast_scale", "9.3", "10.0"),
    ("conv_weight_norm", "8.4", "8.5"),
    ("convtranspose_tied_weight", "5.1", "8.5"),
    ("batchnorm_cast_params", "6.0", "7.0"),
    ("topk_cast_k", "8.5", "8.6"),
    ("topk_min_shape", "6.0", "5.1"),
    ("unsqueeze_cast_axes", "10.6", "10.7"),
    ("unsqueeze_cast_axes", "8.0", "7.2"),
    ("upsample_size_from_shape", "8.2", "8.4"),
    ("slice_computed_bounds", "10.2", "10.3"),
    ("split_from_shape", "8.0", "8.2"),
    ("nms_cast_thresholds", "8.4", "8.5"),
    ("nms_cast_thresholds", "8.0", "7.2"),
    ("quantize_computed_scale", "7.2", "8.0"),
    ("quantize_computed_scale", "7.0", "6.0"),
    ("dropout_cast_training_mode", "8.0", "7.2"),
]


@pytest.mark.parametrize("name,inside,outside", BOUNDARIES, ids=[f"{b[0]}-{b[1]}-{b[2]}" for b in BOUNDARIES])
def test_version_boundaries(name, inside, outside):
    m = FIXTURES[name].build()
    assert passes.get(PASS).apply(m, trt=inside).rewritten > 0
    assert passes.get(PASS).apply(m, trt=outside).rewritten == 0


@pytest.mark.parametrize("version,folded", [("6.0", {2, 3}), ("7.0", {3}), ("10.1", {3})])
def test_slice_bounds_only_for_6_0(version, folded):
    result = passes.get(PASS).apply(FIXTURES["slice_computed_bounds"].build(), trt=version)
    sl = next(n for n in result.model.graph.node if n.op_type == "Slice")
    assert {k for k, name in enumerate(sl.input) if name in _initializer_names(result.model)} == folded


@pytest.mark.parametrize("version,folded", [("7.2", set()), ("9.3", {"ReduceSum"}), ("10.0", {"ReduceMean", "ReduceSum"})])
def test_reduce_axes_ranges(version, folded):
    result = passes.get(PASS).apply(FIXTURES["reduce_cast_axes"].build(), trt=version)
    inits = _initializer_names(result.model)
    assert {n.op_type for n in result.model.graph.node if n.op_type.startswith("Reduce") and n.input[1] in inits} == folded


@pytest.mark.parametrize("fx", REWRITTEN, ids=lambda fx: fx.name)
def test_check_model_clean_after_rewrite(fx):
    m = fx.build()
    fixed = passes.get(PASS).apply(m).model
    for version in ("6.0", "7.2", "8.0", "8.4", "10.1"):
        before = check_model(m, version).findings
        after = check_model(fixed, version).findings
        assert not [f for f in after if f.fix_pass == PASS or f.rule == "must-be-weights"]
        assert {(f.op, f.rule) for f in after if f.rule == "no-importer"} <= {(f.op, f.rule) for f in before if f.rule == "no-importer"}


# ------------------------------------------------------------- ONNX node cases
NODE_OPS = ("InstanceNormalization", "BatchNormalization", "Conv", "ConvTranspose", "TopK", "Squeeze", "Unsqueeze", "Upsample",
            "Resize", "Slice", "ReduceSum", "ReduceMean", "Split", "NonMaxSuppression", "QuantizeLinear", "DequantizeLinear",
            "Dropout")
CASES = [c for op in NODE_OPS for c in node_cases(op)]


def _computed(m: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Graph inputs -> initializers read through an Identity: the same values, computed (not weights)."""
    out_m = onnx.ModelProto()
    out_m.CopyFrom(m)
    keep = [vi for vi in out_m.graph.input if vi.name not in values]
    del out_m.graph.input[:]
    out_m.graph.input.extend(keep)
    for name, value in values.items():
        out_m.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(value), f"{name}__value"))
        out_m.graph.node.insert(0, onnx.helper.make_node("Identity", [f"{name}__value"], [name], name=f"/{name}/Identity"))
    return out_m


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 11)
    computed_names = {name for _, _, name in _weights_inputs(m)}
    if not computed_names & {vi.name for vi in m.graph.input}:
        pytest.skip("the case gives no weights input as a graph input")
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        if any(np.asarray(v).dtype == object for v in [*feeds.values(), *expected]):
            pytest.skip("float8/int4 data has no numpy type")
        frozen = _computed(m, {k: feeds.pop(k) for k in computed_names if k in feeds})
        try:
            native = ort_run(frozen, feeds)
        except Exception as exc:  # noqa: BLE001
            pytest.skip(f"onnxruntime cannot run the case: {str(exc).splitlines()[0][:120]}")
        if not all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(native, expected, strict=False)):
            pytest.skip("onnxruntime's native op does not reproduce the case's expected output")
        result = check_rewrite(frozen, PASS, feeds)
        assert all(name in _weights_names(result.model) for _, _, name in _weights_inputs(result.model))
        for got, want in zip(ort_run(result.model, feeds), expected, strict=False):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------- random kernels
def _conv_model(cin: int, cout: int, groups: int, k: int, dtype: type, chain: str, transpose: bool, bias: bool):
    elem = FLOAT if dtype == np.float32 else FLOAT16
    rng = np.random.default_rng(cin * 100 + cout * 10 + k)
    op = "ConvTranspose" if transpose else "Conv"
    wshape = (cin, cout // groups, k, k) if transpose else (cout, cin // groups, k, k)
    w = rng.standard_normal(wshape).astype(np.float32)
    nodes, inits = [], []
    if chain == "cast":
        inits.append(init("w0", w))
        nodes.append(node("Cast", ["w0"], ["w"], to=elem))
    elif chain == "transpose":
        inits.append(init("w0", np.ascontiguousarray(w.transpose(1, 0, 2, 3)).astype(dtype)))
        nodes.append(node("Transpose", ["w0"], ["w"], perm=[1, 0, 2, 3]))
    else:  # scale: weight standardisation-like arithmetic
        inits += [init("w0", w.astype(dtype)), init("s", np.asarray(0.5, dtype))]
        nodes.append(node("Mul", ["w0", "s"], ["w"]))
    ins = ["x", "w"]
    if bias:
        inits.append(init("b0", rng.standard_normal(cout).astype(dtype)))
        nodes.append(node("Identity", ["b0"], ["b"]))
        ins.append("b")
    nodes.append(node(op, ins, ["y"], name=f"/{op}", group=groups, pads=[1, 1, 1, 1]))
    hw = [d - 1 + k - 2 if transpose else d + 2 - k + 1 for d in (6, 7)]
    return model(nodes, [inp("x", elem, [2, cin, 6, 7])], [out("y", elem, [2, cout, *hw])], inits, opset=13)


def _random_conv(cin, cout, groups, k, dtype, chain, transpose, bias):
    cin, cout = cin * groups, cout * groups
    m = _conv_model(cin, cout, groups, k, dtype, chain, transpose, bias)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    result = check_rewrite(m, PASS, atol=tol, rtol=tol)
    assert [n.op_type for n in result.model.graph.node] == ["ConvTranspose" if transpose else "Conv"]


_CONV = dict(
    cin=st.integers(1, 3), cout=st.integers(1, 3), groups=st.sampled_from([1, 2]), k=st.sampled_from([1, 3]),
    dtype=st.sampled_from([np.float32, np.float16]), chain=st.sampled_from(["cast", "transpose", "scale"]),
    transpose=st.booleans(), bias=st.booleans(),
)


@settings(max_examples=40, deadline=None)
@given(**_CONV)
def test_random_computed_kernels(cin, cout, groups, k, dtype, chain, transpose, bias):
    _random_conv(cin, cout, groups, k, dtype, chain, transpose, bias)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(**_CONV)
def test_random_computed_kernels_slow(cin, cout, groups, k, dtype, chain, transpose, bias):
    _random_conv(cin, cout, groups, k, dtype, chain, transpose, bias)
