"""``graphfix check``: what a TensorRT release's ONNX parser will reject, without TensorRT.

Per node: is the op imported by that release; are its types supported; are the inputs that must
be weights initializers or Constant outputs; are attributes/modes inside the release's
restrictions (each graphfix pass contributes its own version-aware ``match``); are shape tensors
computed only by layers that can compute them (the path to a TopK/ArgMax/NonZero or to tensor
data is named); the model opset; INT64/DOUBLE narrowing. Each finding carries the TensorRT
message it will produce (from ``data/errors.json``) and the pass that fixes it, if one does.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_graphsurgeon as gs

from graphfix import passes
from graphfix.analysis.fold import Folder
from graphfix.analysis.origin import DATA, SHAPE_INPUTS, ValueOrigins
from graphfix.check import restrictions
from graphfix.check.errors import bare_text
from graphfix.graph import Builder, is_weights, tensor_dtype, to_graph
from graphfix.graph.importer import all_graphs, enclosing
from graphfix.onnxio.domains import ORT_ONNX_DOMAIN_OPS
from graphfix.onnxio.ir import default_opset
from graphfix.passes.base import WRONG_RESULTS, Context
from graphfix.trt import support
from graphfix.trt.versions import TrtVersion

BLOCKING, WARNING = "blocking", "warning"

#: Inputs TensorRT treats as shape tensors: op -> input indices (PARSER_NOTES §2).
#: op -> errors.json id for "no importer" of that op (else the generic plugin-fallback entry).
NOT_SUPPORTED_IDS = {
    "Einsum": "einsum-not-supported", "CumSum": "cumsum-not-supported", "ScatterND": "scatternd-not-supported",
    "NonZero": "nonzero-data-dependent-shape", "Unique": "unique-not-supported", "GridSample": "gridsample-not-supported",
    "LayerNormalization": "layernormalization-not-supported", "GroupNormalization": "groupnormalization-not-supported",
    "Gelu": "gelu-not-supported", "Col2Im": "col2im-not-supported", "Mod": "mod-not-supported", "ATen": "aten-fallback-node",
    "Round": "decomposable-op-missing", "Sign": "decomposable-op-missing", "HardSwish": "decomposable-op-missing",
    "Mish": "decomposable-op-missing", "Celu": "decomposable-op-missing", "Trilu": "decomposable-op-missing",
    "OneHot": "decomposable-op-missing", "Shrink": "decomposable-op-missing",
}
#: op -> what to change upstream, for ops a release lacks that no exact rewrite can replace.
NO_REWRITE = {
    "NonZero": "no NonZero before TensorRT 8.5, and no exact rewrite: its output length depends on the data "
               "(torch.nonzero, x[mask], torch.where(cond)). Keep shapes fixed in the export (Where(mask, x, fill), "
               "or TopK over mask scores for a fixed K), run this stage outside the engine, or target TensorRT >= 8.5",
    "RoiAlign": "no RoiAlign importer before TensorRT 8.5, and no exact rewrite in standard ops (its boxes are data): "
                "export the detector's RoI head separately and run it outside the engine, replace the op by TensorRT's "
                "ROIAlign_TRT / MultilevelCropAndResize plugin in the export, or target TensorRT >= 8.5",
    "BitCast": "no BitCast (opset 26) importer in any TensorRT release, and no exact rewrite: reinterpreting a tensor's "
               "bits needs a bitwise view no TensorRT layer or standard op before opset 26 provides. Change the export: "
               "remove the Tensor.view(dtype) reinterpretation from the traced code (compute the value arithmetically), "
               "or run that stage outside the engine",
    "LinearAttention": "no LinearAttention (opset 27) importer in any TensorRT release, and no graphfix rewrite: its "
                       "recurrence runs token by token (the op's function body is a Scan). Export at opset 18-22, where the "
                       "exporter writes the model's own recurrent or chunked linear-attention code in standard ops",
}
#: onnxruntime's quantizers' QOperator and dynamic-quantization ops: no importer in any release
#: (docs/operators.md 8.0-GA..10.1-GA: N; no DEFINE_BUILTIN_OP_IMPORTER in builtin_op_importers.cpp
#: 8.x-9.x or onnxOpImporters.cpp 10.0-GA/10.1-GA), and an integer rewrite would not be TensorRT's int8.
_QDQ_INSTEAD = ("quantize in QDQ format instead (onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ, "
                "activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, extra_options={'ActivationSymmetric': True}) "
                "or NVIDIA ModelOpt), which TensorRT imports as INT8 Q/DQ layers, or export the float model and let TensorRT "
                "calibrate it")
#: The com.microsoft ops onnxruntime's QOperator and dynamic quantizers write (QLinearAdd, QGemm ...).
_ORT_QUANTIZED = frozenset({"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool",
                            "QLinearGlobalAveragePool", "QLinearConcat", "QLinearSoftmax", "QLinearWhere", "QGemm",
                            "QAttention", "QEmbedLayerNormalization", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
                            "DynamicQuantizeLSTM", "QuantizeLinear", "DequantizeLinear", "QLinearConv"})
NO_REWRITE.update({
    op: f"no {op} importer in any TensorRT release ({how}), and no graphfix rewrite: {_QDQ_INSTEAD}"
    for op, how in (("QLinearConv", "QOperator format; asymmetric zero points have no exact Q/DQ form TensorRT reads"),
                    ("QLinearMatMul", "QOperator format; asymmetric zero points have no exact Q/DQ form TensorRT reads"),
                    ("ConvInteger", "dynamic quantization"), ("MatMulInteger", "dynamic quantization"),
                    ("DynamicQuantizeLinear", "dynamic quantization: its scale is computed per run"))
})
_TYPE_TOKENS = {"float32": "FP32", "float16": "FP16", "int32": "INT32", "int64": "INT64", "int8": "INT8", "uint8": "UINT8",
                "bool": "BOOL", "float64": "DOUBLE"}


@dataclass
class CheckFinding:
    node: str
    op: str
    severity: str
    message: str
    error_id: str | None = None
    error_text: str | None = None
    fix_pass: str | None = None
    path: list[str] = field(default_factory=list)
    #: The rule broken: no-importer / must-be-weights / unsupported-type / outside-limits / wrong-results / shape-tensor / opset.
    rule: str = ""
    #: What the finding rests on (operator table, importer source, changelog, issue report).
    evidence: str = ""
    certain: bool = True
    #: What to change in the model's code when no pass rewrites it (data-dependent shape tensors).
    upstream: str = ""
    #: For a shape tensor computed from data: which input of ``node`` reads it.
    shape_input: int | None = None
    #: A whole-model step of graphfix that clears it (``--convert-opset 13``), where no pass does.
    fix_step: str = ""
    #: The run option of an opt-in rewrite that clears it (not exact: never ``fix_pass``), or "".
    opt_in: str = ""

    @property
    def remedy(self) -> str:
        return self.fix_pass or self.fix_step or f"no rewrite: {self.upstream or 'change the export'}"

    def as_dict(self) -> dict[str, Any]:
        """Its fields and remedy (dataclasses.asdict deep-copies: 3 s for 25k findings)."""
        return {**vars(self), "path": list(self.path), "remedy": self.remedy}


@dataclass
class CheckReport:
    requested: str
    version_used: str
    note: str
    opset: int
    findings: list[CheckFinding]

    @property
    def blocking(self) -> bool:
        return any(f.severity == BLOCKING for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "trt": self.requested, "version_used": self.version_used, "note": self.note, "opset": self.opset,
            "blocking": self.blocking, "findings": [f.as_dict() for f in self.findings],
        }


def check_model(model: onnx.ModelProto, trt: str) -> CheckReport:
    """What TensorRT release ``trt``'s parser will reject in ``model``, node by node."""
    return check_graph(to_graph(model), trt, default_opset(model), {t.data_type for t in model.graph.initializer})


def check_graph(graph: gs.Graph, trt: str, opset: int, weight_types: set[int]) -> CheckReport:
    """:func:`check_model` on an imported graph (the pipeline checks its fixed graph in place
    rather than importing the exported model again); ``weight_types``: the initializers' ONNX types."""
    release = support.resolve(trt)
    gc.freeze()  # the collector never rescans the imported graph (its full collections cost seconds there)
    try:
        findings = list(_opset_findings(opset, release))
        folder = Folder(graph)
        origins = ValueOrigins(folder)
        ctx = Context(graph, Builder(graph, "check"), folder, release.version)
        graphs = list(all_graphs(graph))
        where = enclosing(graph) if len(graphs) > 1 else {}
        for g in graphs:
            ctx.graph = g
            for node in list(g.nodes):
                findings.extend(_node_findings(node, release, ctx, origins, where.get(id(g), [])))
        findings.extend(_weight_type_notes(weight_types, release))
    finally:
        gc.unfreeze()
    return CheckReport(trt, release.key, release.note, opset, findings)


def check_nodes(root: gs.Graph, nodes: list[tuple[gs.Graph, gs.Node]], trt: str) -> list[CheckFinding]:
    """The findings of ``check`` for these nodes alone (each with the graph it is in): what the
    nodes a pass added would make the target reject, at the cost of those nodes only."""
    release = support.resolve(trt)
    folder = Folder(root)
    origins = ValueOrigins(folder)
    ctx = Context(root, Builder(root, "check"), folder, release.version)
    findings: list[CheckFinding] = []
    where = enclosing(root) if any(g is not root for g, _ in nodes) else {}
    for g, node in nodes:
        ctx.graph = g
        findings.extend(_node_findings(node, release, ctx, origins, where.get(id(g), [])))
    return findings


def passes_for(report: CheckReport) -> list[str]:
    """The passes ``--passes auto`` runs: those that fix a blocking finding of this report."""
    names = {f.fix_pass for f in report.findings if f.fix_pass and f.severity == BLOCKING}
    return [p.name for p in passes.all_passes() if p.name in names]


# ---------------------------------------------------------------- findings
def _finding(node: gs.Node | None, severity: str, message: str, error_id: str | None, fix_pass: str | None = None,
             path: list[str] | None = None, prefer: str | None = None, rule: str = "", evidence: str = "",
             certain: bool = True, exact: bool = False) -> CheckFinding:
    """``prefer``: quote the error example that mentions it; ``exact``: only such an example."""
    entry = support.error(error_id) if error_id else None
    examples = entry.get("examples", []) if entry else []
    text = next((e for e in examples if prefer and prefer in e), None if exact else examples[0] if examples else None)
    if text is not None:
        text = bare_text(text)
    if exact and text is None:
        error_id = None  # the known messages are about other ops: quoting one would mislead
    return CheckFinding(node.name if node else "", node.op if node else "", severity, message, error_id, text, fix_pass,
                        path or [], rule, evidence, certain)


#: Below this opset every parser from 7.0 on logs "TensorRT supports ONNX graphs generated with at
#: least opset 7. Models using older opsets are not guaranteed to work." and imports anyway
#: (ModelImporter.cpp 7.0, 8.0-GA ... 9.3, 10.0-GA, 10.1-GA); it refuses no opset, old or new.
WARNED_BELOW = 7
#: The opset `graphfix check` advises converting to: the oldest every documented parser lists
#: (the 10.x/11.x tables: 9+) with the ops TensorRT exports use in their current form (Resize-13,
#: Split/Squeeze/Unsqueeze with input axes).
CONVERT_TO = 13


def _opset_findings(opset: int, release: support.Release) -> Iterator[CheckFinding]:
    """The parser only logs a warning for a newer opset (importers read the attributes they know)
    and for one older than 7; the 10.x tables list 9+ and the code does not enforce it."""
    lo, hi = support.opset_range(release)
    if hi is not None and opset > hi:
        yield _finding(None, WARNING, f"model opset {opset} is newer than TensorRT {release.key}'s parser documents (<= {hi}); "
                       "the parser warns and imports what it knows, so only the node findings below block", None,
                       rule="opset", evidence="parser source (opset check is a warning)")
    floor = max(lo or 0, WARNED_BELOW if release.version >= TrtVersion("7.0") else 0)
    if opset < floor:
        said = (f"the parser warns 'at least opset {WARNED_BELOW} ... not guaranteed to work'" if opset < WARNED_BELOW
                else f"its operator table lists opset {lo}+ (the parser warns only below {WARNED_BELOW})")
        finding = _finding(None, WARNING, f"model opset {opset} is older than TensorRT {release.key} supports: {said} and "
                           "imports anyway, reading each op as the newer opsets define it", None, rule="opset",
                           evidence="ModelImporter.cpp 7.0, 8.0-GA..9.3, 10.0-GA, 10.1-GA: LOG_WARNING below opset 7, "
                                    "no refusal; docs/operators.md 10.0-GA/10.1-GA: 'opset 9 to 20'")
        finding.fix_step = (f"--convert-opset {CONVERT_TO}: graphfix IN OUT --convert-opset {CONVERT_TO} --trt {release.requested} "
                            "(onnx.version_converter, verified against onnxruntime like a pass)")
        yield finding


def _node_findings(node: gs.Node, release: support.Release, ctx: Context, origins: ValueOrigins,
                   inside: list[str]) -> Iterator[CheckFinding]:
    """``inside``: the nodes whose subgraph holds ``node`` (outermost first; empty at top level):
    a finding in an If branch or a Loop body gets them, then the node, as its ``path`` (a shape
    tensor's finding keeps its own: the path from the data). A blocking finding no pass fixes names
    the opt-in rewrite that clears it, if any, after its own remedy."""
    findings = list(_findings_of(node, release, ctx, origins))
    opt_in = _opt_in(node, ctx) if any(f.severity == BLOCKING and not f.fix_pass for f in findings) else None
    for finding in findings:
        if inside and finding.shape_input is None and not finding.path:
            finding.path = [*inside, node.name]
        if opt_in is not None and finding.severity == BLOCKING and not finding.fix_pass:  # named, never run by auto
            finding.upstream = f"{finding.upstream}; or {opt_in.REMEDY}" if finding.upstream else opt_in.REMEDY
            finding.opt_in = f"--{opt_in.PASS.name}"
        yield finding


def _opt_in(node: gs.Node, ctx: Context):
    """The opt-in rewrite's module that clears ``node`` (graphfix.passes.OPT_IN: not exact, so never a
    finding's ``fix_pass``, which ``--passes auto`` would run), or None."""
    return next((module for module in passes.OPT_IN if module.clears(node, ctx)), None)


def _findings_of(node: gs.Node, release: support.Release, ctx: Context, origins: ValueOrigins) -> Iterator[CheckFinding]:
    domain = node.domain or ""
    if domain == "org.pytorch.aten" and node.op == "ATen":
        yield _finding(node, BLOCKING, f"ATen fallback node ({node.attrs.get('operator', '?')}): no TensorRT release parses ATen",
                       "aten-fallback-node", _fixing_pass(node, ctx), rule="no-importer", evidence="operator table (no ATen op)")
        return
    entry = support.op_support(node.op, release)
    if domain not in ("", "ai.onnx"):
        claims = list(_pass_claims(node, ctx))  # onnxruntime's contrib ops that a pass lowers, at the releases it says
        if claims:
            yield from claims
        elif entry is not None and entry.supported:
            yield _namesake_finding(node, release)
        else:
            finding = _plugin_finding(node, f"custom-domain op {domain}::{node.op}", release, ctx)
            if domain.startswith("com.microsoft") and node.op in _ORT_QUANTIZED:
                finding.upstream = _QDQ_INSTEAD  # onnxruntime's quantizer wrote it: no plugin exists for it
            yield finding
        return
    if node.op in ORT_ONNX_DOMAIN_OPS and not node.op.endswith("_TRT") and (entry is None or not entry.supported):
        yield _plugin_finding(node, f"{node.op}, an onnxruntime contrib op in the ONNX domain (no ONNX operator),", release, ctx)
        return
    if entry is None or not entry.supported:
        fixer = _fixing_pass(node, ctx)
        source = "importer source" if entry is not None else "operator table (op not listed for this release)"
        newer = support.data()["newer_ops"].get(node.op)
        if newer is not None:
            source = newer["evidence"]
        message = NO_REWRITE.get(node.op) if fixer is None else None  # "no graphfix rewrite" only where none applies
        message = message or f"TensorRT {release.key}'s parser has no importer for {node.op}"
        unknown = support.unknown_for(node.op, release)
        if unknown:
            message += f" ({unknown}; taken as no importer)"
        yield _finding(node, BLOCKING, message, NOT_SUPPORTED_IDS.get(node.op, "unsupported-op-plugin-fallback-generic"),
                       fixer, rule="no-importer", evidence=source, certain=unknown is None)
        return
    claims = list(_pass_claims(node, ctx))
    yield from claims
    claimed = bool(claims)
    yield from _restriction_findings(node, release, ctx)
    typed = False
    # a node a pass rewrites (resize-nearest-mode, qdq-uint8-to-int8) is that pass's finding, not also a
    # rule's with no rewrite; what the rewrite leaves, the check of the fixed model reports
    for r, message in [] if claimed else restrictions.broken(node, ctx):
        typed = typed or r.types
        finding = _finding(node, BLOCKING if r.blocking and r.certain else WARNING, message, r.error, prefer=r.prefer,
                           rule=r.kind, evidence=r.evidence, certain=r.certain)
        finding.upstream = r.upstream
        yield finding
    if not claimed:
        yield from _shape_tensor_findings(node, origins)
        if not typed:
            yield from _type_findings(node, entry, release)


#: Where the parser sends an op it has no importer for, whatever the node's domain.
PLUGIN_EVIDENCE = ("importer source: ModelImporter.cpp dispatches on op_type alone and sends an op without an importer "
                   "to FallbackPluginImporter, which asserts 'Plugin not found' unless a plugin creator of that name is "
                   "registered (builtin_op_importers.cpp on 8.5-GA/8.6-GA, onnxOpImporters.cpp on 10.1-GA)")


def plugin_messages(op: str) -> str:
    """What a build log says for an op that has no importer and no plugin (the parser's words,
    onnx-tensorrt 8.5-GA to 10.1-GA)."""
    return (f"No importer registered for op: {op}. Attempting to import as plugin. "
            f"Searching for plugin: {op}, plugin_version: 1, plugin_namespace: ... "
            "Plugin not found, are the plugin name, version, and namespace correct?")


def _namesake_finding(node: gs.Node, release: support.Release) -> CheckFinding:
    """A custom-domain op named like an ONNX op the release imports (com.microsoft::Gelu): the
    parser ignores the domain and imports it as the ONNX op, right only where both mean the same."""
    return _finding(node, WARNING, f"custom-domain op {node.domain}::{node.op}: TensorRT {release.key}'s parser ignores "
                    f"the domain and imports it with its ONNX {node.op} importer; the result is right only where "
                    f"{node.domain}'s {node.op} takes the same inputs and attributes and means the same",
                    None, rule=WRONG_RESULTS, certain=False,
                    evidence="importer source: ModelImporter.cpp looks importers up by op_type alone (8.5-GA, 8.6-GA, 10.1-GA)")


def _plugin_finding(node: gs.Node, what: str, release: support.Release, ctx: Context) -> CheckFinding:
    """An op the parser can only take as a plugin (onnxruntime's contrib ops, other custom
    domains): blocking unless a plugin library registers it. A pass whose ``match`` takes the node
    (a lowering of onnxruntime's contrib ops) is named as its fix."""
    fixer = _fixing_pass(node, ctx)
    lowered = f"graphfix's {fixer} rewrites it" if fixer else "no graphfix pass lowers it to ONNX ops yet"
    finding = _finding(node, BLOCKING, f"{what} needs a TensorRT plugin library loaded at build time: TensorRT "
                       f"{release.key}'s parser has no importer for it and looks for a plugin named {node.op}; {lowered}",
                       "custom-domain-op-plugin-library-missing", fixer, rule="no-importer", evidence=PLUGIN_EVIDENCE)
    finding.error_text = plugin_messages(node.op)
    onnxruntime = node.op in ORT_ONNX_DOMAIN_OPS or (node.domain or "").startswith("com.microsoft")
    made = (f"the fusion that wrote {node.op} (onnxruntime's transformer optimizer or quantizer output)" if onnxruntime
            else f"the custom op {node.op}")
    finding.upstream = f"export the model without {made}, or load a plugin library that registers {node.op} (trtexec --plugins=)"
    return finding


def _pass_claims(node: gs.Node, ctx: Context) -> Iterator[CheckFinding]:
    """A finding per pass whose rule holds for this node and release (the pass then fixes it)."""
    for p in _passes_for_op().get(node.op, ()):
        rule = p.why(node, ctx)  # the rule of this pass that holds for this release, if any
        if rule is not None:
            message = rule.message + ("" if rule.certain else " (uncertain: thin evidence)")
            yield _finding(node, BLOCKING if rule.certain else WARNING, message, rule.error, p.name, prefer=rule.quote,
                           rule=rule.kind, evidence=rule.evidence, certain=rule.certain)


@functools.cache
def _passes_for_op() -> dict[str, list[passes.Pass]]:
    """Per op type, the passes that look at it, in pipeline order (28 passes x every node was
    most of a check's time on a big export)."""
    by_op: dict[str, list[passes.Pass]] = {}
    for p in passes.all_passes():
        for op in p.ops:
            by_op.setdefault(op, []).append(p)
    return by_op


def _fixing_pass(node: gs.Node, ctx: Context) -> str | None:
    """A pass that rewrites this node away whatever the target (for ops the release lacks)."""
    saved, ctx.trt = ctx.trt, None
    try:
        return next((p.name for p in passes.all_passes() if p.match(node, ctx)), None)
    finally:
        ctx.trt = saved


def _restriction_findings(node: gs.Node, release: support.Release, ctx: Context) -> Iterator[CheckFinding]:
    """Restrictions no pass rewrites: inputs that must be initializers, modes, ranks."""
    op = node.op
    if op == "Squeeze" and len(node.inputs) == 1 and "axes" not in node.attrs and node.inputs[0].shape is not None \
            and any(not isinstance(d, int) for d in node.inputs[0].shape):
        finding = _finding(node, BLOCKING, "Squeeze without axes on a dynamic shape", "squeeze-without-axes-dynamic")
        finding.upstream = ("give the Squeeze its axes in the export (which axes it drops is decided at run time here), "
                            "or fix the input sizes with --fix-shapes NAME:dims so the squeezed dims are known")
        yield finding
    if op == "NonZero":
        yield _finding(node, WARNING, "output shape is data-dependent: downstream layers must accept a dynamic first dim", "nonzero-data-dependent-shape")
    if op == "Gelu" and node.attrs.get("approximate", "none") not in ("none", "tanh"):
        yield _finding(node, BLOCKING, "approximate must be 'none' or 'tanh'", None)
    if op == "LpNormalization" and node.attrs.get("p", 2) not in (1, 2):
        yield _finding(node, BLOCKING, "p must be 1 or 2", None)


#: A path through a learned layer from a detection op: the size comes from detected boxes.
_DETECTION_SOURCES, _LEARNED = frozenset({"NonZero", "TopK", "NonMaxSuppression"}), frozenset({"Gemm", "MatMul", "Conv"})
#: Paths of at most this many nodes are written whole in a finding's message; longer ones as their
#: ends and length (a Mask R-CNN head's is 60 nodes; ``path`` and --json keep every node).
SHORT_PATH = 4
DETECTOR_ADVICE = ("sizes computed from detected boxes (mask pasting, RoI sizes): export the detector without mask pasting "
                   "(return the per-box masks, paste them outside the engine), use TensorRT's ROIAlign/EfficientNMS "
                   "plugins for the heads, or export a fixed detection count")


def path_text(path: list[gs.Node]) -> str:
    """``A 'a' -> B 'b'`` for a short path; ``A 'a' -> … -> Z 'z' (60 nodes)`` for a long one."""
    named = [f"{n.op} '{n.name}'" for n in path]
    return " -> ".join(named) if len(named) <= SHORT_PATH else f"{named[0]} -> … -> {named[-1]} ({len(named)} nodes)"


def _shape_tensor_findings(node: gs.Node, origins: ValueOrigins) -> Iterator[CheckFinding]:
    for k in SHAPE_INPUTS.get(node.op, ()):
        if k >= len(node.inputs) or not node.inputs[k].name:
            continue
        origin = origins.of(node.inputs[k])
        if origin.kind != DATA:
            continue
        path = [n.name for n in origin.path] + [node.name]
        chain = path_text(origin.path) if origin.path else origin.describe()
        if origin.layer:
            message = f"input {k} is a shape tensor computed from {chain}: {origin.layer} cannot compute shape tensors"
        else:
            message = f"input {k} is a shape tensor computed from tensor data ({chain}); compute it from shapes or constants"
        ops = {n.op for n in origin.path}
        detected = bool(origin.path) and origin.path[0].op in _DETECTION_SOURCES and bool(ops & _LEARNED) \
            or bool(ops & {"RoiAlign", "NonMaxSuppression"})
        finding = _finding(node, BLOCKING, message, "layer-cannot-compute-shape-tensor", None, path, prefer=origin.layer)
        finding.upstream = DETECTOR_ADVICE if detected else (
            f"compute it from shapes or constants in the export, or run the part after {origin.path[0].op} outside the engine"
            if origin.path else "compute it from shapes or constants in the export")
        finding.shape_input = k
        yield finding


def from_data(f: dict[str, Any]) -> bool:
    """A finding about a shape tensor computed from data that no pass rewrites (grouped by source)."""
    return f.get("shape_input") is not None and bool(f.get("path")) and not f.get("fix_pass")


def finding_groups(findings: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Findings as a person reads them: the same finding on many nodes once, and the shape
    tensors computed from one data source (a detector's box coordinates feed a dozen Resize,
    Slice and ConstantOfShape inputs) as one group per source node."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for f in findings:
        if from_data(f):
            key: tuple = ("data", f["severity"], f["path"][0], f["error_text"], f["remedy"])
        else:
            key = tuple(f.get(k) for k in ("severity", "op", "message", "error_text", "remedy"))
        groups.setdefault(key, []).append(f)
    return list(groups.values())


def data_source_lines(same: list[dict[str, Any]], indent: str = "          ") -> tuple[str, list[str]]:
    """One group of shape tensors computed from the same data: its headline and a few lines (who
    reads them, the longest path's ends and length, what to change upstream)."""
    f = same[0]
    tail = f["message"].split(": ")[-1] if ": " in f["message"] else ""
    head = (f"{len(same)} shape tensor(s) computed from data starting at '{f['path'][0]}'"
            + (f": {tail}" if tail and "cannot" in tail else ""))
    readers: dict[str, list[str]] = {}
    for g in same:
        readers.setdefault(f"{g['op']} '{g['node']}'", []).append(str(g["shape_input"]))
    shown = [f"{r} (input{'s' if len(ks) > 1 else ''} {', '.join(ks)})" for r, ks in list(readers.items())[:3]]
    more = f", … ({len(readers) - 3} more)" if len(readers) > 3 else ""
    longest = max(same, key=lambda g: len(g["path"]))
    ends = " -> ".join(longest["path"]) if len(longest["path"]) <= SHORT_PATH + 1 else \
        f"{longest['path'][0]} -> … -> {longest['path'][-1]} ({len(longest['path'])} nodes)"
    lines = [f"{indent}read by {', '.join(shown)}{more}",
             f"{indent}path: {ends}; --json lists every node of every path"]
    if f.get("upstream") and not f.get("fix_pass"):
        lines.append(f"{indent}upstream: {f['upstream']}")
    return head, lines


def _type_findings(node: gs.Node, entry: support.OpSupport, release: support.Release) -> Iterator[CheckFinding]:
    if entry.types is None or not node.inputs or not node.inputs[0].name:
        return
    dtype = tensor_dtype(node.inputs[0])
    token = _TYPE_TOKENS.get(str(dtype)) if dtype is not None else None
    if token is None or token in entry.types:
        return
    if token == "INT64" and release.version < TrtVersion("9.0"):
        return  # cast down to INT32 by the parser (a warning in the build log, not a failure)
    if token == "DOUBLE" and is_weights(node.inputs[0]):
        return  # DOUBLE weights (initializers, Constant values) are cast down to FLOAT at import
    if token == "BOOL" and node.op in ("Gather", "GatherElements", "GatherND"):
        return  # handled by bool-gather-cast's version-aware match
    if node.op == "DequantizeLinear" and node.inputs[0].inputs and node.inputs[0].inputs[0].op == "QuantizeLinear":
        return  # TensorRT types a QuantizeLinear's output INT8 whatever ONNX says; the Q's own findings cover UINT8
    yield _finding(node, WARNING, f"{node.op} on {token} is not in TensorRT {release.key}'s documented types {list(entry.types)}",
                   "type-restricted-ops", prefer=node.op, exact=True)


def _weight_type_notes(kinds: set[int], release: support.Release) -> Iterator[CheckFinding]:
    if onnx.TensorProto.INT64 in kinds and release.version < TrtVersion("9.0"):
        yield _finding(None, WARNING, "INT64 initializers are cast down to INT32 (values outside int32 are clamped)", "int64-weights-cast-down")
    if onnx.TensorProto.DOUBLE in kinds:
        yield _finding(None, WARNING, "DOUBLE initializers are cast down to FLOAT", None)
    unsupported = kinds & {onnx.TensorProto.STRING, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}
    if unsupported:
        names = ", ".join(onnx.TensorProto.DataType.Name(k) for k in sorted(unsupported))
        yield _finding(None, BLOCKING, f"initializers of unsupported types: {names}", "unsupported-initializer-dtype")


