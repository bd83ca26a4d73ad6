"""`graphfix check`'s If/Loop/Scan findings on the real exports that hold control flow agree with
what the onnx-tensorrt importers of 8.2, 8.5, 8.6 and 10.1 do with them (a table per fixture and
release, each expected finding with the importer line it rests on). One fixture holds a Scan
(spox_scan_map, stateless); the other Scan rules are covered on hand-made models
(tests/check/test_loop_scan_rules.py)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "fixtures" / "real"
MEMORY = 4 << 30  # models we did not write: capped
RELEASES = ("8.2", "8.5", "8.6", "10.1")

#: Each fixture's control-flow findings per release: (path, op, severity, restriction name, or the
#: fixing pass for a finding a pass rewrites). One for every release unless a release is named.
_VAD_IFS = [f"/If//net{k}/{name}" for k in ("16k", "8k")
            for name in ("If", "rnn/If", "rnn/If_1", f"rnn/If_4//net{k}/rnn/If_2", f"rnn/If_4//net{k}/rnn/If_3")]


def _runtime_dims(*ifs: str) -> set[tuple[str, str, str, str]]:
    """Ifs whose branches give a static dim against a dynamic one: an uncertain warning each."""
    return {(name, "If", "warning", "if-branch-dims-runtime") for name in ifs}


EXPECTED: dict[str, dict[str, set[tuple[str, str, str, str]]]] = {
    # Loop over a computed trip count (Squeeze of a shape), condition passed on (Identity), scan output sized
    # by the trip count: builtin_op_importers.cpp 8.2-GA..8.6-GA / onnxOpImporters.cpp 10.1-GA importLoop keep
    # the trip limit and addLoopCounter (the body reads the iteration number): nothing refused.
    "jax2onnx_scan_rnn_op23": {},
    # tf.while_loop: no trip count, condition computed (Less) in the body, no scan output, the body does not read
    # the iteration number: 8.0-GA onward read body.output(0) through a recurrence (kWHILE): nothing refused.
    "tf2onnx_while_loop_op13": {},
    # tf.map_fn: a trip count and a computed condition (And of two Less) with one scan output: the scan output's
    # length is the trip count (trtScanOut->setInput(1, *tripLimit), 8.2-GA..10.1-GA) while ONNX's is the number
    # of iterations the condition lets run: an uncertain wrong-results warning (loop-scan-output-early-exit).
    "tf2onnx_map_fn_op13": {v: {("map/while_loop", "Loop", "warning", "loop-scan-output-early-exit")} for v in RELEASES},
    # torchvision's paste_masks_in_image: res_append = Concat(res_append, mask) grows every iteration:
    # loop->addRecurrence + setInput(1, body output), 'inputs to IRecurrenceLayer have different dimensions'.
    # Its two Ifs are torchvision's batched_nms (below).
    "maskrcnn_paste_masks": {v: {("Loop_2383", "Loop", "blocking", "loop-carried-shape"), *_runtime_dims("If_1633", "If_2044")}
                             for v in RELEASES},
    # optimum's merged decoder: one If on use_cache_branch; the with-past branch returns [0, 2, 1, 16] placeholders
    # for the cross-attention cache where the other returns [batch_size, 2, encoder_sequence_length, 16]: importIf
    # adds conditional->addOutput(then, else) (ConditionalHelpers.cpp 8.2-GA..8.6-GA, onnxOpImporters.cpp 10.1-GA)
    # and the output layer wants one shape, which holds only for inputs that make them equal: an uncertain warning.
    "optimum_whisper_decoder_merged": {v: {("optimum::if", "If", "warning", "if-branch-dims-runtime")} for v in RELEASES},
    # silero-style VAD: TorchScript's input.dim() Ifs return different ranks under a runtime condition
    # (importIf builds an IIfConditional, 8.2-GA..10.1-GA: 'IIfConditionalOutputLayer inputs must have the
    # same shape'); the sample-rate If's branches agree.
    "torchscript_vad_sr_switch": {v: {(p, "If", "blocking", "if-branch-rank") for p in _VAD_IFS} for v in RELEASES},
    # scatter_reduce's Ifs: a condition that folds, which if-inline inlines (a pass's finding, not a restriction).
    "scatter_reduce_amax": {v: {("/If", "If", "blocking", "if-inline")} for v in RELEASES},
    # spox's op.scan with no state variable (a map over T, non-negative axes): DEFINE_BUILTIN_OP_IMPORTER(Scan)
    # (builtin_op_importers.cpp 7.1..9.3, onnxOpImporters.cpp 10.0-GA/10.1-GA) calls registerLayer(stateVars.at(0), ...),
    # std::out_of_range on an empty state list, at every release: scan-normalize's finding (it adds a scalar state).
    "spox_scan_map": {v: {("Scan_0", "Scan", "blocking", "scan-normalize")} for v in RELEASES},
    # torchvision's batched_nms: 'if boxes.numel() == 0' returns an empty [0] where the other branch returns keep
    # [N]: one shape only for an input with no boxes (if-branch-dims-runtime, as in the merged decoder).
    "fasterrcnn_op11": {v: _runtime_dims("If_1342", "If_1709") for v in RELEASES},
    "fasterrcnn_transform_rpn": {v: _runtime_dims("If_1543", "If_1954") for v in RELEASES},
    "ssdlite_op11": {v: _runtime_dims("If_1779") for v in RELEASES},
    # SAM-style relative positions: resized to [computed, computed] in one branch, the [7, 16] table in the other.
    "vitmatte_like": {v: _runtime_dims("If_727", "If_801") for v in RELEASES},
    # no control flow the importers refuse (LSTM is its own importer)
    "ortquant_lstm_dynamic_s8": {},
}

_PROBE = """
import json, sys
import onnx
from graphfix.check.findings import check_model
from graphfix.check.restrictions import RESTRICTIONS
names = {r.evidence: r.name for r in RESTRICTIONS}
m = onnx.load(sys.argv[1])
print(json.dumps({trt: sorted({("/".join(f.path) or f.node, f.op, f.severity, names.get(f.evidence) or f.fix_pass or f.rule)
                               for f in check_model(m, trt).findings if f.op in ("If", "Loop", "Scan")})
                  for trt in sys.argv[2:]}))
"""


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _found(name: str) -> dict[str, set[tuple[str, ...]]]:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(REAL / f"{name}.onnx"), *RELEASES], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, preexec_fn=_cap)
    assert done.returncode == 0, done.stderr[-2000:]
    return {trt: {tuple(f) for f in rows} for trt, rows in json.loads(done.stdout).items()}


def test_control_flow_findings_agree_with_the_importer_source():
    """One test over every fixture (the table is the claim): per fixture and release, what differs."""
    differ = {}
    for name, expected in EXPECTED.items():
        found = _found(name)
        for trt in RELEASES:
            if found[trt] != expected.get(trt, set()):
                differ[f"{name} @ {trt}"] = {"missing": expected.get(trt, set()) - found[trt],
                                             "unexpected": found[trt] - expected.get(trt, set())}
    assert differ == {}
