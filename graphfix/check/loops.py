"""Loop and Scan rules of the onnx-tensorrt importers that no graphfix pass rewrites.

Read in ``DEFINE_BUILTIN_OP_IMPORTER(Loop)`` / ``(Scan)`` of builtin_op_importers.cpp (7.0, 7.1,
7.2.1, 8.0-GA, 8.2-GA, 8.4-GA, 8.5-GA, 8.6-GA, 9.0-GA, 9.3) and onnxOpImporters.cpp (10.0-GA,
10.1-GA, main@7ecb49a). Both importers build one TensorRT ILoop: each loop-carried value is an
IRecurrenceLayer (initial value, then the body's output), the trip count a kCOUNT trip limit, the
condition a kWHILE trip limit, a scan output an ILoopOutputLayer kCONCATENATE whose length input is
set at import. What they refuse or compute differently from ONNX:

* the iteration number (body input 0) is registered only for a trip count the importer keeps, the
  condition (body input 1) only for a condition input: a body that reads either without it fails
  ModelImporter's ``Node input was not registered``;
* a scan output's length is the trip count, or a dummy 1024 when there is none;
* 7.x reads the initial condition only (the body's condition output is never read);
* ``ctx->registerLayer(stateVars.at(0), ...)`` with no carried value throws std::out_of_range
  (Loop in 7.1 only; Scan 7.1 onward, which the scan-normalize pass rewrites, as it does Scan's
  negative axes);
* IRecurrenceLayer wants both of its inputs of one shape (errors.json loop-carried-shape-changes).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graphfix.analysis.origin import DATA, ValueOrigins
from graphfix.check.parser_rule import Restriction
from graphfix.graph import is_weights, optional_input
from graphfix.passes.base import LIMIT, WRONG_RESULTS, Context

LOOP, SCAN = frozenset({"Loop"}), frozenset({"Scan"})
#: The trip count 8.5-GA..main read as "no limit": INT_MAX (8.x compares the INT32 weight that
#: convertINT64 clamps INT64 values to; 9.0-GA on, an INT64 weight >= INT32_MAX).
INT32_MAX = 2**31 - 1
#: The length the Loop importer gives a scan output when it keeps no trip count.
DUMMY_LENGTH = 1024


# ------------------------------------------------------------------------------------ reading a node
def _body(node: gs.Node) -> gs.Graph | None:
    body = node.attrs.get("body")
    return body if isinstance(body, gs.Graph) else None


def _reads(t: gs.Tensor, body: gs.Graph) -> bool:
    """A node of the body (or of a body nested in it) or the body's outputs use ``t``."""
    return bool(t.outputs) or any(o is t for o in body.outputs)


def _weights_value(t: gs.Tensor | None, ctx: Context) -> np.ndarray | None:
    if t is None or not is_weights(t, empty=False):
        return None
    value = ctx.folder.value(t)
    return None if value is None else np.asarray(value)


def _trip_count(node: gs.Node, ctx: Context) -> str:
    """'absent', 'max' (weights >= INT32_MAX) or 'given'."""
    t = optional_input(node, 0)
    if t is None:
        return "absent"
    value = _weights_value(t, ctx)
    return "max" if value is not None and value.size == 1 and int(value.reshape(-1)[0]) >= INT32_MAX else "given"


def _loop_parts(node: gs.Node) -> tuple[gs.Graph, int, int] | None:
    """The body, the number of loop-carried values and of scan outputs (None for a malformed Loop)."""
    body = _body(node)
    if body is None or len(body.inputs) < 2 or not body.outputs:
        return None
    states = max(len(node.inputs) - 2, 0)
    return body, states, max(len(body.outputs) - 1 - states, 0)


def _scan_state_count(node: gs.Node, ctx: Context) -> int:
    sequence_lens = 1 if ctx.opset == 8 else 0  # Scan-8's optional first input
    return len(node.inputs) - sequence_lens - int(node.attrs.get("num_scan_inputs", 0))


def _computed_condition(body: gs.Graph, ctx: Context) -> bool:
    """The body's condition output is not its condition input passed on (directly or through an
    Identity) nor a constant true: the body can end the loop."""
    cond_in, cond_out = body.inputs[1], body.outputs[0]
    while cond_out is not cond_in and cond_out.inputs and cond_out.inputs[0].op == "Identity":
        cond_out = cond_out.inputs[0].inputs[0]
    if cond_out is cond_in:
        return False
    value = ctx.folder.value(cond_out)
    return value is None or not bool(np.asarray(value).all())


def _iteration_read(node: gs.Node) -> bool:
    parts = _loop_parts(node)
    return parts is not None and _reads(parts[0].inputs[0], parts[0])


# ----------------------------------------------------------------------------- detectors: Loop
def _iteration_without_trip_count(node: gs.Node, ctx: Context) -> str | None:
    if not _iteration_read(node) or _trip_count(node, ctx) != "absent":
        return None
    return (f"the body reads its iteration number '{_body(node).inputs[0].name}' but the Loop has no trip count: the importer "
            "registers the iteration number only with a trip count ('Node input was not registered')")


def _iteration_with_max_trip_count(node: gs.Node, ctx: Context) -> str | None:
    if not _iteration_read(node) or _trip_count(node, ctx) != "max":
        return None
    return (f"the body reads its iteration number '{_body(node).inputs[0].name}' and the trip count is INT_MAX or more: the "
            "importer takes that as 'no limit' and registers no iteration number ('Node input was not registered')")


def _iteration_never_bound(node: gs.Node, ctx: Context) -> str | None:
    if not _iteration_read(node) or _trip_count(node, ctx) == "absent":
        return None  # absent: _iteration_without_trip_count's finding
    return (f"the body reads its iteration number '{_body(node).inputs[0].name}': this release's Loop importer never "
            "registers it ('//ctx->registerTensor(tripLimit, ...)' is commented out)")


def _iteration_is_trip_count(node: gs.Node, ctx: Context) -> str | None:
    if not _iteration_read(node) or _trip_count(node, ctx) == "absent":
        return None
    return (f"the body reads its iteration number '{_body(node).inputs[0].name}': this release gives the body the trip "
            "count there, not the iteration number")


def _condition_unregistered(node: gs.Node, ctx: Context) -> str | None:
    """No condition input, and the body reads its condition input with a node or returns it as a
    carried value or scan output (the condition output, body output 0, is not read then)."""
    parts = _loop_parts(node)
    if parts is None or optional_input(node, 1) is not None:
        return None
    cond_in = parts[0].inputs[1]
    if not cond_in.outputs and not any(o is cond_in for o in parts[0].outputs[1:]):
        return None
    return (f"the Loop has no condition input and the body reads its condition input '{cond_in.name}': the importer "
            "registers it only with a condition ('Node input was not registered')")


def _condition_ignored(node: gs.Node, ctx: Context) -> str | None:
    parts = _loop_parts(node)
    if parts is None or not _computed_condition(parts[0], ctx):
        return None
    return (f"the body computes its condition '{parts[0].outputs[0].name}', which this release never reads: the loop runs "
            "while the initial condition holds, to the trip count (or without end when there is none)")


def _no_loop_state(node: gs.Node, ctx: Context) -> str | None:
    parts = _loop_parts(node)
    if parts is None or parts[1]:
        return None
    return "the Loop carries no value: registerLayer(stateVars.at(0), ...) throws std::out_of_range (onnx/onnx-tensorrt#543)"


def _scan_sequence_lens(node: gs.Node, ctx: Context) -> str | None:
    if ctx.opset != 8 or not node.inputs or not node.inputs[0].name:
        return None
    return (f"a Scan-8 (opset 8) with a sequence_lens input ('{node.inputs[0].name}'): the importer asserts it is absent "
            "('TensorRT doesn't support sequence_lens input for this node!')")


def _scan_outputs_unsized(trip: str):
    def detect(node: gs.Node, ctx: Context) -> str | None:
        parts = _loop_parts(node)
        if parts is None or not parts[2] or _trip_count(node, ctx) != trip:
            return None
        why = "no trip count" if trip == "absent" else "a trip count of INT_MAX or more, which the importer takes as 'no limit'"
        return (f"{parts[2]} scan output(s) and {why}: TensorRT gives each scan output a dummy length of {DUMMY_LENGTH} "
                "(the importer: 'the scan outputs must not be used'), ONNX the number of iterations run")
    return detect


def _scan_outputs_int_max(node: gs.Node, ctx: Context) -> str | None:
    parts = _loop_parts(node)
    if parts is None or not parts[2] or _trip_count(node, ctx) != "max":
        return None
    return (f"{parts[2]} scan output(s) and a trip count of INT_MAX or more: this release sizes each scan output by the trip "
            f"count (clamped to {INT32_MAX}), ONNX by the number of iterations the condition lets run")


def _scan_outputs_early_exit(node: gs.Node, ctx: Context) -> str | None:
    parts = _loop_parts(node)
    if parts is None or not parts[2] or _trip_count(node, ctx) != "given" or not _computed_condition(parts[0], ctx):
        return None
    return (f"{parts[2]} scan output(s) and a condition computed in the body: TensorRT sizes each scan output by the trip "
            "count, ONNX by the iterations run; the two differ whenever the condition ends the loop first")


def _length_from_data(node: gs.Node, ctx: Context) -> str | None:
    """The trip count that becomes the scan outputs' length is computed from tensor values."""
    parts, trip = _loop_parts(node), optional_input(node, 0)
    if parts is None or not parts[2] or trip is None or _trip_count(node, ctx) == "max":
        return None
    origin = ctx.memo("origins", ValueOrigins).of(trip)
    if origin.kind != DATA:
        return None
    return (f"{parts[2]} scan output(s) whose length is the trip count '{trip.name}', computed from tensor data "
            f"({origin.describe()}): a loop output's length must be a shape tensor")


# ------------------------------------------------------------------------------ detectors: both
def _states(node: gs.Node, ctx: Context) -> list[tuple[gs.Tensor, gs.Tensor, gs.Tensor]]:
    """(initial value, body input, body output) of each loop-carried value."""
    body = _body(node)
    if body is None:
        return []
    if node.op == "Loop":
        n = max(len(node.inputs) - 2, 0)
        return list(zip(node.inputs[2:2 + n], body.inputs[2:2 + n], body.outputs[1:1 + n], strict=False))
    first = 1 if ctx.opset == 8 else 0
    n = max(_scan_state_count(node, ctx), 0)
    return list(zip(node.inputs[first:first + n], body.inputs[:n], body.outputs[:n], strict=False))


def _grows(body_in: gs.Tensor, body_out: gs.Tensor) -> int | None:
    """The axis along which the body concatenates something onto the carried value itself."""
    producer = body_out.inputs[0] if body_out.inputs else None
    if producer is None or producer.op != "Concat" or not any(t is body_in for t in producer.inputs):
        return None
    axis = int(producer.attrs.get("axis", 0))
    for t in producer.inputs:
        if t is body_in:
            continue
        if t.shape is None or not -len(t.shape) <= axis < len(t.shape) or t.shape[axis] != 0:
            return axis
    return None


def _shape_change(initial: gs.Tensor, body_in: gs.Tensor, body_out: gs.Tensor) -> str | None:
    axis = _grows(body_in, body_out)
    if axis is not None:
        return f"'{body_out.name}' grows along axis {axis} (a Concat onto '{body_in.name}')"
    for before in (initial, body_in):
        if before.shape is None or body_out.shape is None:
            continue
        if len(before.shape) != len(body_out.shape):
            return f"'{before.name}' has rank {len(before.shape)}, the body's '{body_out.name}' rank {len(body_out.shape)}"
        if any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(before.shape, body_out.shape, strict=True)):
            return f"'{before.name}' is {list(before.shape)}, the body's '{body_out.name}' {list(body_out.shape)}"
    return None


def _carried_shape_changes(node: gs.Node, ctx: Context) -> str | None:
    changes = [c for c in (_shape_change(*s) for s in _states(node, ctx)) if c]
    if not changes:
        return None
    return f"a loop-carried value changes shape between iterations ({'; '.join(changes)})"


# ------------------------------------------------------------------------------------------ rules
_LOOP_SRC = "DEFINE_BUILTIN_OP_IMPORTER(Loop)"
_SCAN_SRC = "DEFINE_BUILTIN_OP_IMPORTER(Scan)"
_ALL_BRANCHES = ("builtin_op_importers.cpp 7.0, 7.1, 7.2.1, 8.0-GA..8.6-GA, 9.0-GA, 9.3; onnxOpImporters.cpp 10.0-GA, "
                 "10.1-GA, main@7ecb49a")
_COUNTER = ("give the Loop a trip count below 2^31-1 (its maximum number of iterations as an INT64 initializer; "
            "tf.while_loop(..., maximum_iterations=N)), or carry a counter of your own as a loop-carried value (initial 0, "
            "+1 in the body) and read it instead of the iteration-number input")
_SIZED = ("give the Loop its trip count (the number of iterations, or an upper bound with a counter carried to slice the "
          "scan output to the iterations run), or collect the per-iteration values in a preallocated loop-carried buffer; "
          "a map over a tensor's first axis (tf.map_fn) can be exported as a Scan, whose length TensorRT takes from its input")
_ONE_SHAPE = ("keep loop-carried values one shape: preallocate the full buffer and write each step into it (ScatterND, "
              "or Where on a step index), or return the per-step results as scan outputs instead of a Concat onto a "
              "carried tensor")

LOOP_RESTRICTIONS: tuple[Restriction, ...] = (
    Restriction("loop-carried-shape", LOOP | SCAN, LIMIT, ">=7.0", _carried_shape_changes,
                f"{_LOOP_SRC} / {_SCAN_SRC}: loop->addRecurrence(initial value), then stateVars.at(i)->setInput(1, body "
                f"output), {_ALL_BRANCHES}; TensorRT: '[Recurrence]: inputs to IRecurrenceLayer have different dimensions' "
                "(NVIDIA/TensorRT#2566, 8.2; onnx/onnx-tensorrt#891); docs/operators.md 10.1-GA: 'loop-carried values must "
                "keep one shape'",
                _ONE_SHAPE, error="loop-carried-shape-changes"),
    Restriction("loop-iteration-without-trip-count", LOOP, LIMIT, ">=7.0", _iteration_without_trip_count,
                f"{_LOOP_SRC}: the iteration number is registered only inside 'if (inputs[0])' (7.0: the trip count tensor; "
                f"7.2.1, 8.0-GA..main: addLoopCounter), {_ALL_BRANCHES}; ModelImporter.cpp parseGraph: "
                "ASSERT(ctx->tensors().count(inputName)) 'Node input was not registered.' (8.0-GA..10.1-GA)",
                _COUNTER),
    Restriction("loop-iteration-max-trip-count", LOOP, LIMIT, ">=8.5", _iteration_with_max_trip_count,
                f"{_LOOP_SRC}, builtin_op_importers.cpp 8.5-GA, 8.6-GA ('isMaxTripCount': the INT32 weight == INT_MAX; "
                "convertINT64 clamps INT64 values to it), 9.0-GA, 9.3, onnxOpImporters.cpp 10.0-GA, 10.1-GA, main@7ecb49a "
                "(an INT64 weight >= INT_MAX): no trip limit and no addLoopCounter; ModelImporter.cpp 'Node input was not "
                "registered.'; 8.0-GA..8.4-GA keep it as a count",
                _COUNTER),
    Restriction("loop-iteration-unregistered", LOOP, LIMIT, ">=7.1,<7.2", _iteration_never_bound,
                f"{_LOOP_SRC}, builtin_op_importers.cpp 7.1: '//ctx->registerTensor(tripLimit, body.input(0).name());' "
                "(7.2.1 registers addLoopCounter); ModelImporter.cpp 7.1: ASSERT(ctx->tensors().count(inputName), "
                "kINVALID_GRAPH)",
                f"build with TensorRT >= 7.2, or {_COUNTER.split(', or ', 1)[1]}"),
    Restriction("loop-iteration-is-trip-count", LOOP, WRONG_RESULTS, ">=7.0,<7.1", _iteration_is_trip_count,
                f"{_LOOP_SRC}, builtin_op_importers.cpp 7.0: ctx->registerTensor(tripLimit, body.input(0).name()) (the "
                "iteration-number input is the trip count; 7.2.1 on: addLoopCounter)",
                f"build with TensorRT >= 7.2, or {_COUNTER.split(', or ', 1)[1]}"),
    Restriction("loop-condition-unregistered", LOOP, LIMIT, ">=7.0", _condition_unregistered,
                f"{_LOOP_SRC}: ctx->registerTensor(cond, body.input(1).name()) only inside 'if (inputs[1])', "
                f"{_ALL_BRANCHES}; ModelImporter.cpp parseGraph: ASSERT(ctx->tensors().count(inputName)) 'Node input was "
                "not registered.' (8.0-GA..10.1-GA)",
                "give the Loop a condition input, a BOOL initializer true, where the body passes its condition on "
                "unchanged (Identity) or returns true (the loop then runs its trip count, as without one); otherwise make "
                "the body's condition output a constant true and drop the body's reads of its condition input"),
    Restriction("loop-condition-ignored", LOOP, WRONG_RESULTS, "<8.0", _condition_ignored,
                f"{_LOOP_SRC}, builtin_op_importers.cpp 7.0, 7.1, 7.2.1: loop->addTripLimit(*cond, kWHILE) on the Loop's "
                "condition input; body.output(0) is never read (8.0-GA adds a recurrence fed by the body's condition)",
                "build with TensorRT >= 8.0, or give the Loop the trip count it runs and a constant-true condition"),
    Restriction("loop-without-state", LOOP, LIMIT, ">=7.1,<7.2", _no_loop_state,
                f"{_LOOP_SRC}, builtin_op_importers.cpp 7.1: ctx->registerLayer(stateVars.at(0), node.name()) (removed in "
                "7.2.1); onnx/onnx-tensorrt#543: 'terminate called after throwing an instance of std::out_of_range'",
                "build with TensorRT >= 7.2, or carry a value through the Loop (any small tensor the body passes on)"),
    Restriction("scan-sequence-lens", SCAN, LIMIT, ">=7.0", _scan_sequence_lens,
                f"{_SCAN_SRC}: 'const int32_t opset8Offset = ctx->getOpsetVersion() == 8 ? 1 : 0' (the model's opset, "
                "not the node's), then ASSERT(inputs.at(0).isNullTensor() && \"TensorRT doesn't support sequence_lens input "
                f"for this node!\", ErrorCode::kUNSUPPORTED_NODE) (ASSERT_NODE from 9.3), {_ALL_BRANCHES}",
                "drop sequence_lens where every sequence runs the full length (an empty input name in its place), or "
                "export at opset >= 9, where Scan has no sequence_lens (mask or pad the shorter sequences in the model)"),
    Restriction("loop-scan-output-unsized", LOOP, WRONG_RESULTS, ">=7.0", _scan_outputs_unsized("absent"),
                f"{_LOOP_SRC}: without a trip limit each scan output's length is addConstantScalar(1024) "
                "(MAX_SCAN_OUTPUT_LENGTH 7.0..8.5-GA, DUMMY_SCAN_OUTPUT_LENGTH 8.6-GA..main), with the comment 'the scan "
                f"outputs must not be used in the rest of the model', {_ALL_BRANCHES}",
                _SIZED),
    Restriction("loop-scan-output-max-trip-count", LOOP, WRONG_RESULTS, ">=8.5", _scan_outputs_unsized("max"),
                f"{_LOOP_SRC}, builtin_op_importers.cpp 8.5-GA..9.3, onnxOpImporters.cpp 10.0-GA..main@7ecb49a: an INT_MAX "
                "trip count leaves tripLimit null ('isMaxTripCount'), so each scan output gets the dummy length 1024",
                _SIZED),
    Restriction("loop-scan-output-int-max", LOOP, WRONG_RESULTS, "<8.5", _scan_outputs_int_max,
                f"{_LOOP_SRC}, builtin_op_importers.cpp 7.0..8.4-GA: trtScanOut->setInput(1, *tripLimit) with the trip "
                "count (INT64 weights clamped to INT32_MAX by convertINT64); 8.5-GA adds isMaxTripCount",
                _SIZED),
    Restriction("loop-scan-output-length-from-data", LOOP, LIMIT, ">=7.0", _length_from_data,
                f"{_LOOP_SRC}: trtScanOut->setInput(1, *tripLimit), {_ALL_BRANCHES}; NvInfer.h ILoopOutputLayer "
                "(TensorRT 7.1..10.x API docs): 'If getLoopOutput() is kCONCATENATE or kREVERSE, a second input must be "
                "provided. The second input must be a 0D shape tensor, defined before the loop commences'",
                "compute the trip count from shapes or constants (Shape/Gather of the tensor the loop walks), or give the "
                "Loop an upper bound as an INT64 initializer and slice the scan outputs to the iterations run",
                error="layer-cannot-compute-shape-tensor"),
    Restriction("loop-scan-output-early-exit", LOOP, WRONG_RESULTS, ">=8.0", _scan_outputs_early_exit,
                f"{_LOOP_SRC}, builtin_op_importers.cpp 8.0-GA..9.3, onnxOpImporters.cpp 10.0-GA..main@7ecb49a: "
                "trtScanOut->setInput(1, *tripLimit) (kCONCATENATE of the trip count's length) while the body's condition "
                "is a kWHILE trip limit of its own",
                "when the condition can end the loop before the trip count, carry a counter and slice the scan outputs to the "
                "iterations run, or make the trip count exact and the condition constant true",
                certain=False),
)
