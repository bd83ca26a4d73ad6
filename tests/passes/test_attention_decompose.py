"""attention-decompose: fixtures, every ONNX Attention node case, real opset-23 exports, version
boundaries (no importer before 10.14; the 10.14+ importer's refusals), random shapes/heads/masks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphfix
from fixtures.make_fixtures import all_fixtures
from fixtures.recipes._onnx import BOOL, FLOAT, INT64, inp, model, node, out
from graphfix import passes
from graphfix.check.findings import BLOCKING, check_model
from tests.helpers.support import (
    case_feeds,
    check_fixture,
    check_rewrite,
    node_cases,
    ort_run,
    remaining_matches,
    runnable,
)

FIXTURES = {fx.name: fx for group, fx in all_fixtures() if group == "attention_decompose"}
REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
REAL_ATTENTION = ["gpt2_sdpa_causal_opset23", "gpt2_kv_cache_opset23", "vit_sdpa_opset23"]
PASS = "attention-decompose"


def _ops(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


def _tol(dtype: np.dtype) -> float:
    return 2e-3 if dtype == np.float16 else 1e-5


@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_fixture_rewritten_equal_and_accepted_before_10_14(fx):
    tol = 2e-3 if "fp16" in fx.name else 1e-5
    result = check_fixture(fx, PASS, atol=tol, rtol=tol)
    assert "Attention" not in _ops(result.model)
    for version in ("8.6", "10.1", "10.7"):
        blocking = [f for f in check_model(result.model, version).findings if f.severity == BLOCKING]
        assert blocking == [], (version, [(f.op, f.message) for f in blocking])


# ------------------------------------------------------------------ ONNX node cases
def _expected_or_ort(m: onnx.ModelProto, feeds: dict, expected: list) -> list[np.ndarray]:
    """onnxruntime's outputs on the original node; the spec's where onnxruntime refuses the case
    (a mask shorter than the keys). onnxruntime writes the lowest float where mode 2's
    qk_matmul_output is masked; the spec (and the decomposition) -inf."""
    try:
        got = ort_run(m, feeds)
    except Exception:  # noqa: BLE001 - onnxruntime's own limits, not the decomposition's
        return list(expected)
    return [np.where(g == np.finfo(g.dtype).min, -np.inf, g) if g.dtype.kind == "f" else g for g in got]


def _close(actual: np.ndarray, desired: np.ndarray, name: str) -> None:
    assert actual.dtype == desired.dtype and actual.shape == desired.shape, (name, actual.dtype, desired.dtype)
    tol = _tol(actual.dtype)
    np.testing.assert_allclose(actual.astype(np.float64), desired.astype(np.float64), atol=tol, rtol=tol, err_msg=name)


CASES = node_cases("Attention")


def test_there_are_many_node_cases():
    assert len(CASES) >= 90


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnx_node_cases(case):
    m = runnable(case.model, 23)
    result = passes.get(PASS).apply(m)
    assert result.rewritten == 1 and "Attention" not in _ops(result.model), result.findings
    if case.model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16:
        # onnxruntime's CPU provider runs neither the op nor bfloat16 feeds: onnx's reference
        # runs the decomposition (float32 inside), against the spec's outputs, one bf16 rounding
        from onnx.reference import ReferenceEvaluator

        for inputs, expected in case.data_sets:
            got = ReferenceEvaluator(result.model).run(None, case_feeds(m, inputs))
            for g, e in zip(got, expected, strict=True):
                assert g.dtype == e.dtype and g.shape == e.shape
                np.testing.assert_allclose(g.astype(np.float32), e.astype(np.float32), atol=1e-2, rtol=1e-2)
        return
    for inputs, expected in case.data_sets:
        feeds = case_feeds(m, inputs)
        want = _expected_or_ort(m, feeds, expected)
        got = ort_run(result.model, feeds)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"output {k}")


def test_fully_masked_rows_are_zero_not_nan():
    """An all-False boolean mask row, and the leading rows of a negative causal offset (opset 24,
    nonpad_kv_seqlen < q_len), give 0 as the spec's errata and onnxruntime say."""
    m = model([node("Attention", ["q", "k", "v", "mask"], ["y"], name="/a")],
              [inp("q", FLOAT, [1, 2, 3, 4]), inp("k", FLOAT, [1, 2, 5, 4]), inp("v", FLOAT, [1, 2, 5, 4]),
               inp("mask", BOOL, [1, 1, 3, 5])], [out("y", FLOAT, [1, 2, 3, 4])], opset=23)
    rng = np.random.default_rng(0)
    mask = rng.random((1, 1, 3, 5)) > 0.3
    mask[0, 0, 1] = False
    feeds = {"q": rng.standard_normal((1, 2, 3, 4), np.float32), "k": rng.standard_normal((1, 2, 5, 4), np.float32),
             "v": rng.standard_normal((1, 2, 5, 4), np.float32), "mask": mask}
    y = ort_run(check_rewrite(m, PASS, feeds).model, feeds)[0]
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y[0, :, 1], 0)

    m24 = model([node("Attention", ["q", "k", "v", "", "", "", "n"], ["y"], name="/a", is_causal=1)],
                [inp("q", FLOAT, [2, 1, 4, 4]), inp("k", FLOAT, [2, 1, 6, 4]), inp("v", FLOAT, [2, 1, 6, 4]),
                 inp("n", INT64, [2])], [out("y", FLOAT, [2, 1, 4, 4])], opset=24)
    feeds = {"q": rng.standard_normal((2, 1, 4, 4), np.float32), "k": rng.standard_normal((2, 1, 6, 4), np.float32),
             "v": rng.standard_normal((2, 1, 6, 4), np.float32), "n": np.array([2, 6], np.int64)}
    y = ort_run(check_rewrite(m24, PASS, feeds).model, feeds)[0]
    np.testing.assert_array_equal(y[0, 0, :2], 0)  # offset 2 - 4 = -2: queries 0 and 1 see no key
    assert np.abs(y[0, 0, 2:]).min() > 0 and np.abs(y[1]).min() > 0


def test_grouped_heads_are_expanded_not_copied():
    result = check_fixture(FIXTURES["gqa_3d_causal"], PASS)
    ops = _ops(result.model)
    assert "Expand" in ops and "Tile" not in ops
    assert sum(int(np.prod(t.dims)) for t in result.model.graph.initializer) < 64


def test_softmax_is_the_max_subtracted_op_and_causal_alone_builds_no_row_guard():
    result = check_fixture(FIXTURES["gqa_3d_causal"], PASS)
    ops = _ops(result.model)
    assert ops.count("Softmax") == 1 and "Exp" not in ops and "TopK" not in ops


# ---------------------------------------------------------------- releases
def test_kv_cache_outputs_rewritten_at_10_16_single_output_causal_kept():
    p = passes.get(PASS)
    kv = p.apply(FIXTURES["kv_cache_present_outputs"].build(), trt="10.16")
    assert kv.rewritten == 1 and "Attention" not in _ops(kv.model)
    causal = onnx.load(str(REAL / "gpt2_sdpa_causal_opset23.onnx"))
    assert p.apply(causal, trt="10.16").rewritten == 0
    assert p.apply(causal, trt="10.7").rewritten == 2
    findings = check_model(FIXTURES["kv_cache_present_outputs"].build(), "10.16").findings
    assert [(f.error_id, f.fix_pass) for f in findings if f.severity == BLOCKING] == [("attention-unsupported-form", PASS)]


@pytest.mark.parametrize("name,rewritten_at_10_16", [
    ("kv_cache_present_outputs", True), ("gqa_3d_causal", True), ("bool_mask_softcap", True),
    ("fp16_float_mask_qk_output", True), ("nonpad_external_cache", True), ("sliding_window_dynamic", True)])
def test_10_14_importer_refusals(name, rewritten_at_10_16):
    p = passes.get(PASS)
    for version in ("10.14", "10.16", "11.1"):
        assert (p.apply(FIXTURES[name].build(), trt=version).rewritten > 0) == rewritten_at_10_16
    assert p.apply(FIXTURES[name].build(), trt="10.13").rewritten == 1


def test_no_importer_before_10_14_for_every_form():
    m = onnx.load(str(REAL / "vit_sdpa_opset23.onnx"))
    for version in ("8.6", "10.1", "10.7", "10.13"):
        findings = [f for f in check_model(m, version).findings if f.op == "Attention"]
        assert findings and all(f.fix_pass == PASS and f.severity == BLOCKING for f in findings), version
    assert not [f for f in check_model(m, "10.14").findings if f.op == "Attention"]


# ----------------------------------------------------------------- real exports
@pytest.mark.parametrize("trt", ["8.6", "10.1", "10.7"])
@pytest.mark.parametrize("name", REAL_ATTENTION)
def test_real_opset23_exports_fixed_and_verified(name, trt):
    """The files hold no RMSNormalization/RotaryEmbedding (GPT-2 and ViT): Attention is their only
    operator these releases lack."""
    result = graphfix.fix(str(REAL / f"{name}.onnx"), "auto", trt=trt)
    att = next(p for p in result.report.passes if p.name == PASS)
    assert att.verdict == "kept" and att.rolled_back_nodes == 0, att
    assert "Attention" not in _ops(result.model)
    assert result.report.status == "ok", [p.reason for p in result.report.passes]
    assert not [f for f in check_model(result.model, trt).findings if f.severity == BLOCKING]


@pytest.mark.parametrize("name", REAL_ATTENTION)
def test_real_opset23_exports_kept_at_10_16(name):
    result = graphfix.fix(str(REAL / f"{name}.onnx"), "auto", trt="10.16")
    assert "Attention" in _ops(result.model) and not any(p.name == PASS for p in result.report.passes)


# ----------------------------------------------------------------- hypothesis
@st.composite
def attention_cases(draw):
    rank = draw(st.sampled_from([3, 4]))
    kv_heads = draw(st.integers(1, 3))
    q_heads = kv_heads * draw(st.integers(1, 3))
    batch, q_len = draw(st.integers(1, 2)), draw(st.integers(1, 5))
    past = draw(st.sampled_from([0, 0, 1, 3]))
    kv_len = q_len if draw(st.booleans()) else draw(st.integers(1, 6))
    head, v_head = draw(st.sampled_from([2, 4, 8])), draw(st.sampled_from([2, 4]))
    mask = draw(st.sampled_from(["none", "bool", "float"]))
    mask_shape = draw(st.sampled_from(["2d", "4d_b1", "4d_full"]))
    attrs = {"is_causal": int(draw(st.booleans()))}
    if draw(st.booleans()):
        attrs["scale"] = draw(st.floats(0.05, 2.0))
    if draw(st.booleans()):
        attrs["softcap"] = draw(st.sampled_from([1.0, 5.0, 50.0]))
    dynamic = draw(st.booleans())
    return rank, q_heads, kv_heads, batch, q_len, kv_len, past, head, v_head, mask, mask_shape, attrs, dynamic, \
        draw(st.integers(0, 2**31))


def _random_model(rank, q_heads, kv_heads, batch, q_len, kv_len, past, head, v_head, mask, mask_shape, attrs, dynamic, seed):
    rng = np.random.default_rng(seed)
    total = past + kv_len
    if rank == 3:
        attrs = {**attrs, "q_num_heads": q_heads, "kv_num_heads": kv_heads}
        shapes = {"q": [batch, q_len, q_heads * head], "k": [batch, kv_len, kv_heads * head],
                  "v": [batch, kv_len, kv_heads * v_head]}
    else:
        shapes = {"q": [batch, q_heads, q_len, head], "k": [batch, kv_heads, kv_len, head],
                  "v": [batch, kv_heads, kv_len, v_head]}
    names = ["q", "k", "v"]
    if mask != "none":
        shapes["mask"] = {"2d": [q_len, total], "4d_b1": [1, 1, q_len, total], "4d_full": [batch, q_heads, q_len, total]}[mask_shape]
        names.append("mask")
    if past:
        shapes["past_key"], shapes["past_value"] = [batch, kv_heads, past, head], [batch, kv_heads, past, v_head]
        names += [""] * (4 - len(names)) + ["past_key", "past_value"]
    types = {n: (BOOL if n == "mask" and mask == "bool" else FLOAT) for n in shapes}
    dims = {n: [f"{n}{i}" for i in range(len(s))] if dynamic else s for n, s in shapes.items()}
    outs = ["y"] + (["present_key", "present_value"] if past else [])
    m = model([node("Attention", names, outs, name="/a", **attrs)], [inp(n, types[n], dims[n]) for n in shapes],
              [out(o, FLOAT, [f"{o}{i}" for i in range(rank if o == "y" else 4)]) for o in outs], opset=23)
    feeds = {n: (rng.random(s) > 0.25 if types[n] == BOOL else
                 (rng.standard_normal(s) * (3 if n == "mask" else 1)).astype(np.float32)) for n, s in shapes.items()}
    return m, feeds


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attention_cases())
def test_random_attention_matches_onnxruntime(case):
    m, feeds = _random_model(*case)
    result = check_rewrite(m, PASS, feeds, atol=1e-5, rtol=1e-5)
    assert "Attention" not in _ops(result.model) and remaining_matches(result.model, PASS) == []


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_qk_matmul_output_modes_with_softcap(mode):
    """Mode 0 is the raw product, before softcap (the spec and onnxruntime; onnx's reference
    returns it after softcap), 1 after softcap, 2 with the (finite) float mask added, 3 the
    probabilities."""
    m = model([node("Attention", ["q", "k", "v", "bias"], ["y", "", "", "qk"], name="/a", softcap=2.0,
                    qk_matmul_output_mode=mode)],
              [inp("q", FLOAT, [1, 2, 3, 4]), inp("k", FLOAT, [1, 2, 5, 4]), inp("v", FLOAT, [1, 2, 5, 4]),
               inp("bias", FLOAT, [3, 5])], [out("y", FLOAT, [1, 2, 3, 4]), out("qk", FLOAT, [1, 2, 3, 5])], opset=23)
    rng = np.random.default_rng(mode)
    feeds = {n: (rng.standard_normal(s) * 3).astype(np.float32)
             for n, s in {"q": (1, 2, 3, 4), "k": (1, 2, 5, 4), "v": (1, 2, 5, 4), "bias": (3, 5)}.items()}
    qk = ort_run(check_rewrite(m, PASS, feeds, atol=1e-5, rtol=1e-5).model, feeds)[1]
    raw = feeds["q"] @ feeds["k"].transpose(0, 1, 3, 2) / 2  # default scale 1/sqrt(4)
    capped = 2 * np.tanh(raw / 2)
    if mode < 3:
        np.testing.assert_allclose(qk, [raw, capped, capped + feeds["bias"]][mode], atol=1e-5, rtol=1e-5)


@st.composite
def windowed_cases(draw):
    batch, heads, q_len = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 5))
    kv_len = draw(st.integers(q_len, 8))
    return (batch, heads, q_len, kv_len, draw(st.booleans()), draw(st.integers(-1, 3)), draw(st.integers(-1, 3)),
            draw(st.booleans()), draw(st.sampled_from(["none", "bool", "float"])), draw(st.booleans()),
            draw(st.integers(0, 2**31)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(windowed_cases())
def test_random_nonpad_and_window_match_onnxruntime(case):
    """Opset 25 (24 without a window): causal frontier offset per batch by nonpad_kv_seqlen - q_len,
    sliding windows, keys past each batch's length hidden, empty rows zero."""
    batch, heads, q_len, kv_len, causal, left, right, with_nonpad, mask, dynamic, seed = case
    rng = np.random.default_rng(seed)
    shapes = {"q": [batch, heads, q_len, 4], "k": [batch, heads, kv_len, 4], "v": [batch, heads, kv_len, 4]}
    names = ["q", "k", "v", ""]
    if mask != "none":
        shapes["mask"], names[3] = [1, 1, q_len, kv_len], "mask"
    if with_nonpad:
        shapes["nonpad"] = [batch]
        names += ["", "", "nonpad"]
    attrs = {"is_causal": int(causal)}
    if left >= 0 or right >= 0:
        attrs.update(left_window_size=left, right_window_size=-1 if causal else right)
    types = {n: BOOL if (n == "mask" and mask == "bool") else INT64 if n == "nonpad" else FLOAT for n in shapes}
    dims = {n: [f"{n}{i}" for i in range(len(s))] if dynamic and n != "nonpad" else s for n, s in shapes.items()}
    m = model([node("Attention", names, ["y"], name="/a", **attrs)], [inp(n, types[n], dims[n]) for n in shapes],
              [out("y", FLOAT, ["b", "h", "s", "d"])], opset=25 if "left_window_size" in attrs else 24)
    feeds = {n: rng.random(s) > 0.3 if types[n] == BOOL else
             rng.integers(max(0, q_len - 2), kv_len + 1, s).astype(np.int64) if n == "nonpad" else
             rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    result = check_rewrite(m, PASS, feeds, atol=1e-5, rtol=1e-5)
    assert not np.isnan(ort_run(result.model, feeds)[0]).any()


@pytest.mark.parametrize("trt", ["8.6", "10.1", "10.7"])
@pytest.mark.parametrize("fx", FIXTURES.values(), ids=lambda fx: fx.name)
def test_auto_fixes_every_fixture_verified(fx, trt):
    result = graphfix.fix(fx.build(), "auto", trt=trt, val_range=fx.val_range)
    assert result.report.status == "ok" and "Attention" not in _ops(result.model)
    assert [(p.name, p.verdict) for p in result.report.passes] == [(PASS, "kept")]
    assert not [f for f in check_model(result.model, trt).findings if f.severity == BLOCKING]


def test_mask_shorter_than_a_dynamic_external_cache_is_padded_at_runtime():
    """Opset 24: the mask covers only the first keys of an external cache whose length is
    dynamic; the rest is padded with -inf from Shape. onnxruntime refuses such a mask, so the
    oracle is onnx's reference implementation."""
    from onnx.reference import ReferenceEvaluator

    m = model([node("Attention", ["q", "k", "v", "mask", "", "", "n"], ["y"], name="/a", is_causal=1)],
              [inp("q", FLOAT, ["b", 2, "s", 4]), inp("k", FLOAT, ["b", 2, "t", 4]), inp("v", FLOAT, ["b", 2, "t", 4]),
               inp("mask", FLOAT, ["b", 1, "s", "m"]), inp("n", INT64, ["b"])], [out("y", FLOAT, ["b", 2, "s", 4])], opset=24)
    result = passes.get(PASS).apply(m)
    assert result.rewritten == 1 and "Concat" in _ops(result.model)
    rng = np.random.default_rng(3)
    feeds = {"q": rng.standard_normal((2, 2, 3, 4), np.float32), "k": rng.standard_normal((2, 2, 7, 4), np.float32),
             "v": rng.standard_normal((2, 2, 7, 4), np.float32), "mask": rng.standard_normal((2, 1, 3, 5), np.float32),
             "n": np.array([4, 5], np.int64)}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_allclose(ort_run(result.model, feeds)[0], want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attrs,says", [({"is_causal": 7}, "is_causal 7"), ({"scale": float("nan")}, "scale nan"),
                                        ({"scale": -0.5}, "scale -0.5"), ({"softcap": float("inf")}, "softcap inf")],
                         ids=["is_causal_7", "scale_nan", "scale_negative", "softcap_inf"])
def test_out_of_spec_attributes_are_findings_not_rewrites(attrs, says):
    """onnxruntime reads is_causal 7 as 0 and the decomposition has no NaN or negative scale:
    the node is left as it is and said why, not rewritten for verification to roll back."""
    m = model([node("Attention", ["q", "k", "v"], ["y"], **attrs)], [inp(n, FLOAT, [1, 2, 4, 8]) for n in "qkv"],
              [out("y", FLOAT, [1, 2, 4, 8])], opset=23)
    applied = passes.get(PASS).apply(m)
    assert applied.rewritten == 0 and says in applied.findings[0].message, applied.findings
