"""Exit codes on other producers' conventions (issue 31 item 1): a model onnxruntime runs is never
exit 2 or 3. An onnxruntime contrib op no pass lowers is exit 4 for every release (a blocking
finding whose TensorRT message and evidence are about that op); the rest of the model is still
rewritten and verified with it present. One a pass lowers (issue 32) is exit 0."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli_runs import run, save
from tests.helpers.producers import (
    declared_dim_model,
    microsoft_model,
    simplified_layernorm_model,
    unlowered_microsoft_model,
    unlowered_onnx_domain_model,
    unused_domains_model,
)

RELEASES = ["8.5", "8.6", "10.1"]
LOWERED = {"onnx-domain": (simplified_layernorm_model, ["contrib-norm-lower"]),
           "com.microsoft": (microsoft_model, ["contrib-norm-lower", "contrib-activation-lower"])}


def _auto(m, trt: str, tmp_path, capfd) -> tuple[int, dict, str]:
    src = save(m, tmp_path / "in.onnx")
    rc, _, err = run([src, tmp_path / "out.onnx", "--passes", "auto", "--trt", trt, "--quiet", "--report", tmp_path / "r.json"],
                     capfd)
    return rc, json.loads((tmp_path / "r.json").read_text()) if (tmp_path / "r.json").exists() else {}, err


@pytest.mark.parametrize("trt", RELEASES)
def test_contrib_op_no_pass_lowers_is_exit_4_with_its_own_message_and_the_rest_is_verified(trt, tmp_path, capfd):
    rc, report, err = _auto(unlowered_microsoft_model(), trt, tmp_path, capfd)
    assert rc == 4, err
    assert (tmp_path / "out.onnx").exists()
    left = [f for f in report["trt"]["after"]["findings"] if f["severity"] == "blocking"]
    assert [f["op"] for f in left] == ["Inverse"]
    for f in left:
        assert f["rule"] == "no-importer" and f["fix_pass"] is None
        assert f"No importer registered for op: {f['op']}" in f["error_text"] and "grid_sampler" not in f["error_text"]
        assert "FallbackPluginImporter" in f["evidence"] and "10.1-GA" in f["evidence"]
    assert [p["name"] for p in report["passes"] if p.get("rewritten")] == ["fold-weights"]
    assert report["final"] and all(v["passed"] for v in report["final"].values())  # verified with the contrib op there


@pytest.mark.parametrize("trt", RELEASES)
def test_an_onnx_domain_contrib_op_no_pass_lowers_is_exit_4(trt, tmp_path, capfd):
    rc, report, err = _auto(unlowered_onnx_domain_model(), trt, tmp_path, capfd)
    assert rc == 4, err
    assert [f["op"] for f in report["trt"]["after"]["findings"] if f["severity"] == "blocking"] == ["Affine"]


@pytest.mark.parametrize("trt", RELEASES)
@pytest.mark.parametrize("kind", LOWERED)
def test_contrib_ops_a_pass_lowers_are_exit_0_verified(kind, trt, tmp_path, capfd):
    build, lowering = LOWERED[kind]
    rc, report, err = _auto(build(), trt, tmp_path, capfd)
    assert rc == 0, err
    kept = {p["name"] for p in report["passes"] if p.get("rewritten") and p["verdict"] == "kept"}
    assert set(lowering) <= kept
    assert report["final"] and all(v["passed"] for v in report["final"].values())


@pytest.mark.parametrize("trt", RELEASES)
@pytest.mark.parametrize("build", [lambda: declared_dim_model(-1), lambda: declared_dim_model(0), unused_domains_model],
                         ids=["dim-1", "dim0", "unused-domains"])
def test_dims_and_domains_are_exit_0(build, trt, tmp_path, capfd):
    rc, report, err = _auto(build(), trt, tmp_path, capfd)
    assert rc == 0, err
    assert report["notes"]


def test_check_quotes_the_parser_for_the_op_in_question(tmp_path, capfd):
    src = save(unlowered_microsoft_model(), tmp_path / "in.onnx")
    rc, out, err = run(["check", src, "--trt", "8.6"], capfd)
    assert rc == 1, err
    assert "grid_sampler" not in out
    assert "No importer registered for op: Inverse" in out
    src = save(unlowered_onnx_domain_model(), tmp_path / "in.onnx")
    rc, out, err = run(["check", src, "--trt", "10.1"], capfd)
    assert rc == 1 and not err, err
    assert "Affine, an onnxruntime contrib op in the ONNX domain" in out


def test_check_names_the_lowering_for_the_contrib_ops_it_rewrites(tmp_path, capfd):
    rc, out, err = run(["check", save(microsoft_model(), tmp_path / "in.onnx"), "--trt", "8.6"], capfd)
    assert rc == 1, err
    assert "fix: contrib-activation-lower" in out and "fix: contrib-norm-lower" in out


def test_check_says_what_it_accepted_in_notes(tmp_path, capfd):
    src = save(declared_dim_model(-1), tmp_path / "in.onnx")
    rc, out, err = run(["check", src, "--trt", "8.6"], capfd)
    assert rc == 1 and not err, err  # the computed Unsqueeze/Squeeze axes: fold-weights fixes them
    assert "note: input 'x' (axis 0) declares a negative dim" in out
    rc, out, err = run(["check", save(unused_domains_model(), tmp_path / "in.onnx"), "--trt", "10.1", "--json"], capfd)
    assert json.loads(out)["notes"] == ["the model imports domain(s) no node uses (Paddle, ai.onnx.ml, com.microsoft, "
                                        "com.microsoft.nchwc, com.microsoft.mlfeaturizers, com.microsoft.experimental, "
                                        "com.microsoft.dml): ignored"]
