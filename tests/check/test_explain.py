"""`graphfix explain`: every corpus example is explained by its entry; ranking; node names; CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from graphfix import passes
from graphfix.check import errors
from graphfix.check.errors import match_log
from graphfix.cli.main import main
from graphfix.trt import support

ENTRIES = support.errors()
FIXED_BY = {error_id: p.name for p in reversed(passes.all_passes()) for error_id in p.fixes}  # first fixer wins


def test_every_entry_has_examples():
    assert all(e.get("examples") for e in support.errors())


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_examples_are_explained_by_their_entry(entry):
    """An entry's example lines are excerpts of one log (e.g. 'In function importClip:' then the
    assertion on the next line); an 'Attempting to import as plugin' INFO line only counts next to
    a plugin-not-found line, so one is added where the excerpt has none."""
    error_id = entry["id"]
    log = "\n".join(entry["examples"])
    if "Attempting to import as plugin" in log and "not found" not in log.lower():
        log += "\nERROR: Plugin not found, are the plugin name, version, and namespace correct?"
    matches = match_log(log)
    ids = [m.id for m in matches]
    assert error_id in ids, ids
    m = matches[ids.index(error_id)]
    fixers = [p for p in passes.all_passes() if error_id in p.fixes]
    if error_id in errors.GENERIC:  # the catch-all names the pass that rewrites the logged op (Mish), never another op's
        assert m.fix_pass == next((p.name for p in passes.all_passes() if m.op in p.ops), None)
    else:
        assert m.fix_pass == next((p.name for p in fixers if m.op in p.ops), FIXED_BY.get(error_id))
    assert m.cause and m.fix


def test_real_error_outranks_noise():
    log = (
        "[W] onnx2trt_utils.cpp:374: Your ONNX model has been generated with INT64 weights, while TensorRT does not natively "
        "support INT64. Attempting to cast down to INT32.\n"
        "[E] In node 12 with name: /model/Einsum and operator: Einsum (importEinsum): UNSUPPORTED_NODE: "
        "Invalid character(s) in Einsum equation: B,D\n"
        "[E] Network must have at least one output\n"
    )
    matches = match_log(log)
    assert matches[0].id == "einsum-unsupported-equation" and matches[0].node == "/model/Einsum"
    assert matches[0].fix_pass == "einsum-to-matmul"
    assert "int64-weights-cast-down" not in [m.id for m in matches]


def test_noise_alone_is_still_explained():
    only = "Your ONNX model has been generated with INT64 weights, while TensorRT does not natively support INT64."
    assert [m.id for m in match_log(only)] == ["int64-weights-cast-down"]


def test_plugin_info_line_alone_is_not_an_error():
    log = "INFO: No importer registered for op: ScatterND. Attempting to import as plugin.\nINFO: Successfully created plugin: ScatterND\n"
    assert match_log(log) == []


def test_op_specific_before_generic_plugin_failure():
    log = ("INFO: No importer registered for op: GridSample. Attempting to import as plugin.\n"
           "ERROR: getPluginCreator could not find plugin: GridSample version: 1\n")
    ids = [m.id for m in match_log(log)]
    assert ids[0] == "gridsample-not-supported" and ids.index("gridsample-not-supported") < ids.index("unsupported-op-plugin-fallback-generic")


def test_cli_with_model_confirms_the_pattern(tmp_path, capsys):
    log = tmp_path / "build.log"
    log.write_text('ERROR: builtin_op_importers.cpp:359 In function importClip:\n[8] Assertion failed: inputs.at(2).is_weights() && "Clip max value must be an initializer!"\n')
    assert main(["explain", str(log), "--model", "fixtures/fold_clip/clip_shape_max_static.onnx"]) == 0
    out = capsys.readouterr().out
    assert "clip-bound-not-initializer" in out and "--passes fold-clip" in out and "pattern confirmed at /ClipBoxes" in out
    assert main(["explain", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["id"] == "clip-bound-not-initializer"


def test_cli_unknown_log_and_missing_file(tmp_path, capsys):
    log = tmp_path / "ok.log"
    log.write_text("[I] Engine built in 12.3 s\n")
    assert main(["explain", str(log)]) == 1
    assert "no known TensorRT error" in capsys.readouterr().out
    assert main(["explain", str(tmp_path / "nope.log")]) == 2
    assert "no such file" in capsys.readouterr().err


#: A TensorRT 8.x trtexec log: the node block before the error, every line stamped, the NodeProto's
#: ``name:`` before ``op_type:`` and an attribute's ``name:`` after it.
TRT8_LOG = """\
[10/10/2022-17:50:38] [I] [TRT] ----------------------------------------------------------------
[10/10/2022-17:50:38] [E] [TRT] ModelImporter.cpp:773: While parsing node number 0 [Pad -> "y"]:
[10/10/2022-17:50:38] [E] [TRT] ModelImporter.cpp:774: --- Begin node ---
[10/10/2022-17:50:38] [E] [TRT] ModelImporter.cpp:775: input: "x"
input: "pads"
output: "y"
name: "{name}"
op_type: "Pad"
attribute {{
  name: "mode"
  s: "wrap"
  type: STRING
}}

[10/10/2022-17:50:38] [E] [TRT] ModelImporter.cpp:776: --- End node ---
[10/10/2022-17:50:38] [E] [TRT] ModelImporter.cpp:779: ERROR: builtin_op_importers.cpp:2191 In function importPad:
[8] Assertion failed: {assertion}
[10/10/2022-17:50:38] [E] Failed to parse onnx file
"""
MODE = 'mode == "constant" && value == 0.f && "This version of TensorRT only supports constant 0 padding!"'
PADS = 'inputs.at(1).is_weights() && "The input pads is required to be an initializer."'
PAD = "fixtures/pad_to_concat/circular_pad.onnx"  # one Pad, named '/Pad', writing 'y'


def test_trt8_parsing_block_names_the_node_and_the_quote_is_whole():
    m = match_log(TRT8_LOG.format(name="/encoder/pad/Pad", assertion=MODE))[0]
    assert (m.id, m.node, m.op, m.output) == ("pad-non-zero-or-non-constant-mode", "/encoder/pad/Pad", "Pad", "y")
    assert m.line == f"[8] Assertion failed: {MODE}"
    # matched on the line that only introduces the message: the message comes with it
    m = match_log(TRT8_LOG.format(name="/encoder/pad/Pad", assertion=PADS))[0]
    assert m.id == "pad-pads-not-initializer" and m.line == (
        f"ModelImporter.cpp:779: ERROR: builtin_op_importers.cpp:2191 In function importPad: [8] Assertion failed: {PADS}")


@pytest.mark.parametrize("name,where", [("/Pad", "node /Pad (Pad)"), ("", "op Pad writing 'y'")])
def test_cli_finds_the_node_by_name_or_by_output(name, where, tmp_path, capsys):
    """An exporter that names no node leaves TensorRT only the output to go by."""
    log = tmp_path / "build.log"
    log.write_text(TRT8_LOG.format(name=name, assertion=MODE))
    assert main(["explain", str(log), "--model", PAD]) == 0
    out = capsys.readouterr().out
    assert f"error: pad-non-zero-or-non-constant-mode: {where}" in out
    assert "found /Pad" in out or "pattern confirmed at /Pad" in out
    assert "10/10/2022" not in out and "[E]" not in out


def test_long_messages_are_shortened_at_a_sentence_end():
    said = errors.quote("[E] " + "This is one sentence. " * 40 + "ERROR", 4, 10)
    assert said.endswith("sentence. …") and len(said) <= errors.QUOTE_CHARS + 2


def test_generic_plugin_error_for_an_op_the_model_lacks(tmp_path, capsys):
    log = tmp_path / "build.log"
    log.write_text("[8] No importer registered for op: FancyNorm\n")
    assert main(["explain", str(log)]) == 0
    assert "unsupported-op-plugin-fallback-generic: op FancyNorm" in capsys.readouterr().out
    assert main(["explain", str(log), "--model", PAD]) == 1
    out = capsys.readouterr().out
    assert "name FancyNorm, which" in out and "does not have" in out and "cause:" not in out


def test_explanations_point_only_at_files_that_exist():
    root = Path(__file__).resolve().parents[2]
    for entry in ENTRIES:
        for text in (entry["fix"], entry["pattern"]):
            for name in re.findall(r"[\w/.-]+\.(?:md|json|py|txt)\b", text):
                assert (root / name).exists() or list(root.rglob(Path(name).name)), (entry["id"], name)


def test_check_with_nothing_blocking_prints_no_command(capsys):
    assert main(["check", "fixtures/fold_clip/clip_int.onnx", "--trt", "8.6"]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("0 blocking, 1 warning(s)") and "graphfix IN OUT" not in out
    assert main(["check", "fixtures/demo/superglue_matcher.onnx", "--trt", "10.1"]) == 1
    assert "1 blocking (1 fixable by graphfix passes: graphfix IN OUT --passes auto --trt 10.1)" in capsys.readouterr().out


#: TensorRT 8.x failing on onnxruntime's com.microsoft SkipLayerNormalization (the node dump
#: carries its domain), then the same in TensorRT 10.x's words, then only the assertion.
_SKIP_LN_8 = """[I] [TRT] No importer registered for op: {op}. Attempting to import as plugin.
[I] [TRT] Searching for plugin: {op}, plugin_version: 1, plugin_namespace:
[E] [TRT] ModelImporter.cpp:771: While parsing node number 2 [{op} -> "y"]:
[E] [TRT] ModelImporter.cpp:772: --- Begin node ---
[E] [TRT] ModelImporter.cpp:773: input: "f"
name: "/ln/{op}"
op_type: "{op}"
domain: "{domain}"
[E] [TRT] ModelImporter.cpp:774: --- End node ---
[E] [TRT] ModelImporter.cpp:777: ERROR: builtin_op_importers.cpp:5404 In function importFallbackPluginImporter:
[8] Assertion failed: creator && "Plugin not found, are the plugin name, version, and namespace correct?"
"""
_SKIP_LN_10 = """[I] [TRT] No importer registered for op: SkipLayerNormalization. Attempting to import as plugin.
[E] [TRT] IPluginRegistry::getCreator: Error Code 4: API Usage Error (Cannot find plugin: SkipLayerNormalization, version: 1, namespace:.)
[E] [TRT] ModelImporter.cpp:956: ERROR: ModelImporter.cpp:4863 In function importFallbackPluginImporter:
[6] creator && "Plugin not found, are the plugin name, version, and namespace correct?"
"""
_BARE = """[I] [TRT] Searching for plugin: {op}, plugin_version: 1, plugin_namespace:
[E] [TRT] ModelImporter.cpp:726: ERROR: builtin_op_importers.cpp:5404 In function importFallbackPluginImporter:
[8] Assertion failed: creator && "Plugin not found, are the plugin name, version, and namespace correct?"
"""


@pytest.mark.parametrize("log", [_SKIP_LN_8.format(op="SkipLayerNormalization", domain="com.microsoft"), _SKIP_LN_10,
                                 _BARE.format(op="SkipLayerNormalization"), _BARE.split("\n", 1)[1]],
                         ids=["trt8", "trt10", "plugin-lookup-only", "assertion-only"])
def test_plugin_errors_name_no_unrelated_pass(log):
    """A contrib op's plugin error names the pass that lowers that op (contrib-norm-lower for
    SkipLayerNormalization), never another op's pass (if-inline); a log that names no op, none."""
    matches = match_log(log)
    want = "contrib-norm-lower" if "SkipLayerNormalization" in log else None
    assert matches and all(m.fix_pass == want for m in matches), [(m.id, m.op, m.fix_pass) for m in matches]
    assert all(m.op != "FallbackPluginImporter" for m in matches)
    if "SkipLayerNormalization" in log:
        assert {m.op for m in matches} == {"SkipLayerNormalization"}


@pytest.mark.parametrize("op,domain,fix", [("Mish", "", "activation-decompose"), ("Gelu", "", "gelu-decompose"),
                                           ("Gelu", "com.microsoft", "contrib-activation-lower"), ("CastLike", "", "castlike-to-cast")])
def test_the_catch_all_names_the_pass_that_rewrites_the_logged_op(op, domain, fix):
    """TensorRT 8.x's node dump names the domain: a pass is named when it rewrites that op of that
    domain. A log that shows only the plugin lookup says no domain: the ONNX op's pass."""
    dumped = [m for m in match_log(_SKIP_LN_8.format(op=op, domain=domain)) if m.id in errors.GENERIC]
    assert dumped and dumped[0].op == op and dumped[0].fix_pass == fix
    bare = [m for m in match_log(_BARE.format(op=op)) if m.id in errors.GENERIC]
    assert bare and bare[0].op == op and bare[0].fix_pass == next(p.name for p in passes.all_passes() if op in p.ops)


_IF_LOG = "[E] [TRT] /If_OutputLayer: IIfConditionalOutputLayer inputs must have the same shape. Shapes are [-1] and [-1,1].\n"


def test_an_if_shape_error_names_every_pass_that_may_fix_it(tmp_path, capsys):
    log = tmp_path / "build.log"
    log.write_text(_IF_LOG)
    assert main(["explain", str(log)]) == 0
    out = capsys.readouterr().out
    assert "--passes auto (if-inline or if-rank-unify" in out


def test_with_the_model_the_if_pass_whose_pattern_is_there_is_named(tmp_path, capsys):
    """Before, only if-inline was tried: 'sees nothing to rewrite' for an If if-rank-unify rewrites."""
    log = tmp_path / "build.log"
    log.write_text(_IF_LOG)
    assert main(["explain", str(log), "--model", "fixtures/if_rank_unify/squeeze_dynamic_dim_reshape.onnx"]) == 0
    assert "pattern confirmed at /If: if-rank-unify rewrites it" in capsys.readouterr().out


def test_an_if_no_pass_rewrites_gets_checks_finding_and_the_change_to_make(tmp_path, capsys):
    log = tmp_path / "build.log"
    log.write_text(_IF_LOG)
    assert main(["explain", str(log), "--model", "fixtures/real/optimum_whisper_decoder_merged.onnx"]) == 0
    out = capsys.readouterr().out
    assert "found optimum::if: then/else outputs agree in shape only" in out
    assert "(if-branch-dims-runtime)" in out and "--set-input" in out and "sees nothing" not in out
