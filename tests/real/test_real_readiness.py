"""Issue 17's promise on exports of real model code: for every real-export fixture and every
release Jetson and desktop deployments use, `--passes auto --trt V` writes a model `graphfix
check` finds nothing blocking or wrong-results in (NonZero/RoiAlign excepted where the release has
no importer), verified on onnxruntime at the shapes graphfix chose (two for dynamic models)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

import graphfix
from graphfix.check.findings import BLOCKING, DETECTOR_ADVICE, check_model
from graphfix.check.findings import NO_REWRITE as NO_REWRITE_ADVICE
from graphfix.onnxio.ir import runtime_compatible
from graphfix.trt.versions import TrtVersion

REAL = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "real").glob("*.onnx"))
RELEASES = ["8.2", "8.5", "8.6", "10.1"]
#: No importer and no honest rewrite (data-dependent counts): findings that say what to change upstream
#: (as do the shape tensors a Mask R-CNN computes from its detected boxes: DETECTOR_ADVICE).
NO_REWRITE = {"NonZero", "RoiAlign"}
#: torchvision's Mask R-CNN pastes each detection's mask by a Loop that Concats onto a carried tensor
#: (one per detection): IRecurrenceLayer refuses a carried shape that changes (check/loops.py); no
#: exact rewrite, the finding says to emit scan outputs instead.
GROWING_LOOP = "loop-carried-shape-changes"
#: No exact rewrite: dynamic quantization (TensorRT has no run-time activation quantization) and asymmetric
#: or UINT8 zero points (`check`'s symmetric-quantization rules) are ready only with their opt-in rewrite,
#: which changes results within its bound and says so (graphfix.pipeline.inexact).
OPT_IN = {p.stem: {"dequantize_dynamic": True} if "_dynamic_" in p.stem else {"requantize_symmetric": True}
          for p in REAL if p.stem.startswith("ortquant_") and ("_dynamic_" in p.stem or "_u8u8" in p.stem)}


#: Issue 31's producers and issue 32's deployment tools (fixtures/real/export_producers_*.py): every
#: file gets a verified output; what no pass can rewrite (dynamic or asymmetric quantization, an
#: op no release imports and graphfix does not lower) is a finding that says what to change.
PRODUCED = ("tf2onnx_", "paddle2onnx_", "jax2onnx_", "spox_", "optimum_", "ortopt_", "ortquant_", "fp16_", "torchscript_",
            "modelopt_")


#: Where a pass that would clear a finding is undone, known and open: paddle2onnx's multiclass_nms3
#: computes TopK's K and Range's inputs at run time; before 8.6, topk-constant-k's TopK is INT
#: (refused: the region is undone) and the 8.2 shape-tensor rules leave range-inputs/fold-weights
#: findings. Exit 4 with those findings named, the model verified.
PASS_GAPS = {"paddle2onnx_det_ppyoloe_nms_op16": "TopK K / Range from NMS counts before 8.6",
             "paddle2onnx_v1_det_ppyoloe_nms_op16": "TopK K / Range from NMS counts before 8.6"}


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_auto_leaves_nothing_the_release_rejects(path):
    model = onnx.load(str(path))
    dynamic = any(not d.HasField("dim_value") for i in model.graph.input for d in i.type.tensor_type.shape.dim)
    produced = path.stem.startswith(PRODUCED)
    for trt in RELEASES:
        result = graphfix.fix(model, "auto", trt=trt, **OPT_IN.get(path.stem, {}))
        assert result.report.status in ("ok", "blocked"), [p.reason for p in result.report.passes if p.reason]
        # parity: nothing undone for changing results (a rewrite undone because what it writes is
        # refused too, as Q/DQ with asymmetric zero points, leaves the model as it was)
        assert not [p.name for p in result.report.passes if "differ" in p.reason], trt
        found = [f for f in check_model(result.model, trt).findings if f.severity == BLOCKING or f.rule == "wrong-results"]
        if path.stem in OPT_IN:  # with its opt-in rewrite, nothing is left that the release refuses
            assert [f for f in found if f.severity == BLOCKING] == [], (trt, [(f.op, f.node, f.message) for f in found][:5])
        if produced:  # no pass left undone (but known gaps); the rest says what to change upstream
            if not (path.stem in PASS_GAPS and TrtVersion(trt) < TrtVersion("8.6")):
                assert [f for f in found if f.fix_pass] == [], (trt, [(f.op, f.fix_pass, f.message) for f in found if f.fix_pass][:5])
            said = [f for f in found if f.severity == BLOCKING and not (f.upstream or f.fix_step or f.fix_pass)
                    and f.op not in NO_REWRITE_ADVICE]  # NO_REWRITE's messages say what to change themselves
            assert said == [], (trt, [(f.op, f.message) for f in said])
            continue
        left = [f for f in found if f.op not in NO_REWRITE
                and f.upstream != DETECTOR_ADVICE  # Mask R-CNN's pasting: sizes from detected boxes
                and f.error_id != GROWING_LOOP]
        assert left == [], (trt, [(f.op, f.node, f.message) for f in left][:5])
        if dynamic and any(p.rewritten for p in result.report.passes):
            assert len(result.report.shapes["shapes"]) >= 2, trt


#: Issue 22's families (fixtures/real/export_real_decoders.py): LLM decode steps with a KV cache,
#: an LLM without one and a latent decoder; found by the glob above, listed so that losing one fails.
DECODERS = ["gpt2_decode_kv_legacy", "gpt2_decode_kv_dynamo", "llama_decode_kv_legacy", "llama_decode_kv_dynamo",
            "gpt2_no_cache", "vae_decoder_legacy"]


def test_decoder_families_are_in_the_readiness_matrix():
    assert set(DECODERS) <= {p.stem for p in REAL}


#: Exports with STFT/DFT (fixtures/real/export_real_stft.py): the pass that removes them, and feeds.
FOURIER = {
    "whisper_logmel_stft": ("stft-decompose", lambda rng: {"waveform": rng.standard_normal((2, 16000)).astype(np.float32)}),
    "whisper_logmel_dynamic": ("stft-decompose", lambda rng: {"waveform": rng.standard_normal((2, 777)).astype(np.float32)}),
    "fnet_fourier_mixing": ("dft-decompose", lambda rng: {"input_ids": rng.integers(0, 64, (3, 16))}),
}


@pytest.mark.parametrize("name", list(FOURIER))
def test_fourier_exports_rewritten_with_parity(name):
    """The dynamo torch.stft log-mel front ends and FNet's torch.fft: STFT/DFT gone at every
    release, the rewrite kept by verification, and the fixed model's onnxruntime outputs equal the
    original's float64 transform (the reference evaluator) to float rounding, and onnxruntime's own
    outputs to its STFT/DFT's error (~1e-3 for a 400-sample frame)."""
    pass_name, feeds = FOURIER[name]
    path = REAL[0].parent / f"{name}.onnx"
    model = onnx.load(str(path))
    feed = feeds(np.random.default_rng(0))
    reference = ReferenceEvaluator(model).run(None, feed)[0]
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    for trt in RELEASES:
        result = graphfix.fix(model, "auto", trt=trt)
        rewrite = next(p for p in result.report.passes if p.name == pass_name)
        assert rewrite.verdict == "kept" and rewrite.rewritten >= 1, (trt, rewrite.reason)
        assert not any(n.op_type in ("STFT", "DFT") for n in result.model.graph.node)
        session = ort.InferenceSession(runtime_compatible(result.model).SerializeToString(), providers=["CPUExecutionProvider"])
        fixed = session.run(None, feed)[0]
        np.testing.assert_allclose(fixed, reference, rtol=0, atol=1e-5 * (1 + float(np.abs(reference).max())))
        np.testing.assert_allclose(fixed, original, rtol=0, atol=1e-3)
