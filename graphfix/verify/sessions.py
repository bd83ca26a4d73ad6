"""onnxruntime verification: inputs made once, one session per graph state, compared per output.

Inputs come from polygraphy's DataLoader (seeded, dtype-aware); sessions run in graphfix's
onnxruntime worker process (graphfix.runtime.worker: a crash or an endless run there ends the
run in one line instead of taking graphfix down) and their outputs are polygraphy RunResults
that ``polygraphy run --load-outputs`` reads; comparisons apply polygraphy SimpleCompareFunc's
rule (abs/rel tolerance per element) in numpy (graphfix.verify.compare).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from polygraphy.comparator import RunResults

from graphfix.analysis.aten_reference import evaluator, run_results
from graphfix.errors import GraphfixError, first_line
from graphfix.fs.signals import reraise_swallowed_signal
from graphfix.onnxio.ir import runtime_compatible
from graphfix.onnxio.proto import Assembled, all_nodes
from graphfix.runtime import session as session_mod
from graphfix.runtime import worker as runtime_worker
from graphfix.verify import spill
from graphfix.verify.compare import (
    DEFAULT_TOLERANCE,
    finite_max_abs,
    iteration_result,
    iterations,
    rounding_floor,
)
from graphfix.verify.inputs import Feeds, nudged_feeds, quiet_polygraphy


# ------------------------------------------------------------------ running
class CannotRun(Exception):
    """onnxruntime cannot run a model graphfix must run (the caller says which and why)."""


class SessionCounter:
    """Counts onnxruntime sessions (reports say what verification cost) and remembers whether
    verification's tuned session settings had to give way to onnxruntime's defaults."""

    def __init__(self) -> None:
        self.count = 0
        self.tuned = True
        #: (model, feeds, results): the original's run under the other settings (:func:`switched_run`)
        self.switched: tuple[object, Feeds, RunResults] | None = None


#: Said in the report when verification had to use onnxruntime's default session settings.
DEFAULT_SETTINGS_NOTE = ("onnxruntime could not run the model with verification's session settings (no graph "
                         "optimizations, no memory pattern) but runs it with its defaults: every session used the defaults")


def session(model: onnx.ModelProto, base_dir=None, tuned: bool = True):
    """A bare onnxruntime CPU session (the candidate-shape search), in graphfix's worker process."""
    if any(n.op_type == "ATen" for n in all_nodes(model.graph)):  # onnxruntime has no ATen kernels

        return evaluator(model)

    with runtime_worker.describing("the input model"):
        return session_mod.session(runtime_compatible(model), base_dir, tuned)


def run(model: onnx.ModelProto | Assembled, feeds: Feeds, name: str, counter: SessionCounter | None = None,
        base_dir=None) -> RunResults:
    """One onnxruntime session for ``model`` (a ModelProto, or an Assembled one whose weights are
    another model's protos), run on every feed (``base_dir``: where its external data lives;
    onnxruntime reads it from there)."""
    parts = Assembled.of(model)
    if not on_onnxruntime(parts):

        return run_results(parts.proto(), feeds, name)
    parts = parts.compatible()
    tuned = counter.tuned if counter is not None else True
    try:
        return _compare_run(parts, feeds, name, counter, base_dir, tuned)
    except GraphfixError:
        raise
    except Exception:  # noqa: BLE001 - the tuned settings may be what fails (below)
        if not tuned:
            raise
    # A model a default session runs must never be refused: the tuned settings pre-allocate
    # outputs from declared shapes (a legacy scatter_reduce If declaring [24] while computing [3,8]).
    results = _compare_run(parts, feeds, name, counter, base_dir, tuned=False)
    if counter is not None:
        counter.tuned = False
    return results


def _compare_run(parts: Assembled, feeds: Feeds, name: str, counter: SessionCounter | None, base_dir, tuned: bool,
                 kept: bool = False) -> RunResults:
    """One session (in graphfix's onnxruntime worker, graphfix.runtime.worker), run on every feed,
    as polygraphy's RunResults (what ``polygraphy run --load-outputs`` reads). ``kept``: a run kept
    for later, each feed's outputs spilled (graphfix.verify.spill) as they come, so one feed's
    shared memory at most is alive at once."""

    if counter is not None:
        counter.count += 1
    with runtime_worker.describing(_LABELS.get(name, f"the model {name!r}")):
        made = session_mod.session(parts, base_dir, tuned)
    try:
        its = []
        with quiet_polygraphy():
            for feed in feeds:
                it = iteration_result(made.run_named(feed), made.last_runtime, name)
                its.append(spill.spilled(RunResults([(name, [it])]))[0][1][0] if kept else it)
                del it
    finally:
        made.close()
    reraise_swallowed_signal()
    return RunResults([(name, its)])


#: What a session runs, as a failure names it.
_LABELS = {"original": "the input model", "graphfix-probe": "the verification probe (the input model with every "
           "rewritten region beside it)", "graphfix-fixed": "the fixed model", "graphfix-noise": "the input model (noise floor)"}


def _wrong_in_onnxruntime(model: onnx.ModelProto, initializers: list[onnx.TensorProto] | None = None) -> bool:
    """A node the installed onnxruntime cannot run or computes wrongly, in the main graph or in
    a body, so it cannot be the reference: ATen (no kernels), Col2Im that is not 2-D with a
    dilation > 1 (onnxruntime 1.32 misplaces the blocks; the ONNX reference evaluator follows the
    spec), STFT/DFT of a length that is not a power of two, an opset-26+ op it does not
    implement. ``initializers``: the model's, where ``model`` is a stub without them."""
    weights: dict[str, onnx.TensorProto] | None = None
    for n in all_nodes(model.graph):
        if n.op_type == "ATen":
            return True
        if n.op_type == "Col2Im" and not _onnxruntime_col2im_dilation_ok():
            dilations = next((list(a.ints) for a in n.attribute if a.name == "dilations"), [])
            if len(dilations) != 2 and any(d > 1 for d in dilations):
                return True
        if n.op_type in ("STFT", "DFT") and not _onnxruntime_dft_length_ok():
            if weights is None:
                weights = {t.name: t for t in (model.graph.initializer if initializers is None else initializers)}
            if not _power_of_two_length(n, weights, model):
                return True
        if n.op_type in _NEWEST and n.domain in ("", "ai.onnx") and _onnxruntime_lacks(n.op_type):
            return True
    return False


#: Ops of opset >= 26 (onnx 1.23): the installed onnxruntime may not implement them yet (1.32 has no
#: SwiGLU); a model with one is then run on the ONNX reference evaluator, which follows the spec.
_NEWEST = frozenset({"BitCast", "CumProd", "LinearAttention", "CausalConvWithState", "SwiGLU"})


@functools.cache
def _onnxruntime_lacks(op: str) -> bool:
    """Asked of the installed onnxruntime once: a one-node float model of ``op`` at its opset is
    refused as NOT_IMPLEMENTED."""
    import onnxruntime as ort
    from onnx import TensorProto, defs, helper

    schema = defs.get_schema(op)
    names = [f"i{k}" for k, f in enumerate(schema.inputs) if f.option != defs.OpSchema.FormalParameterOption.Optional]
    node = helper.make_node(op, names, ["y"])
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2]) for i in names],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", schema.since_version)])
    try:
        ort.InferenceSession(runtime_compatible(m).SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - only "not implemented" means the op is missing
        return "NOT_IMPLEMENTED" in str(exc)
    return False


def _power_of_two_length(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto], model: onnx.ModelProto) -> bool:
    """The node's transform length is known and a power of two (onnxruntime then runs its radix-2
    FFT, exact to float rounding): STFT's frame_length or window as an initializer, DFT's
    dft_length, else (not an irfft) the static length of its axis."""
    def weight(k: int) -> np.ndarray | None:
        init = weights.get(node.input[k]) if len(node.input) > k and node.input[k] else None
        return None if init is None else onnx.numpy_helper.to_array(init).reshape(-1)

    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "STFT":
        length, window = weight(3), weight(2)
        n = int(length[0]) if length is not None else window.size if window is not None else 0
    elif weight(1) is not None:
        n = int(weight(1)[0])
    elif attrs.get("inverse") and attrs.get("onesided"):
        n = 0  # the length is 2 * (bins - 1): left to the reference
    else:
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        axis = weight(2) if opset >= 20 else None
        axis = int(axis[0]) if axis is not None else (-2 if opset >= 20 else int(attrs.get("axis", 1)))
        n = _static_dim(model, node.input[0], axis)
    return n > 0 and n & (n - 1) == 0


def _static_dim(model: onnx.ModelProto, name: str, axis: int) -> int:
    """Dim ``axis`` of tensor ``name`` as declared in the model (0 when unknown)."""
    for vi in (*model.graph.input, *model.graph.value_info):
        if vi.name == name and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if -len(dims) <= axis < len(dims) and dims[axis].HasField("dim_value"):
                return int(dims[axis].dim_value)
    return 0


@functools.cache
def _onnxruntime_dft_length_ok() -> bool:
    """Asked of the installed onnxruntime: is its DFT of a length that is not a power of two (400,
    Whisper's n_fft) within REGION_ULPS of a float64 FFT? onnxruntime 1.32's is not (about N^2 ulps
    lost: 4e-3 on bins near 40), so STFT/DFT rewrites, exact to float rounding, would be rolled back."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    n = 400
    graph = helper.make_graph([helper.make_node("DFT", ["x"], ["y"], axis=1)], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(0).standard_normal((1, n, 1)).astype(np.float32)
    try:
        got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    except Exception:  # noqa: BLE001 - cannot run it: do not trust it
        return False
    ref = np.fft.fft(x[0, :, 0].astype(np.float64))
    ref = np.stack([ref.real, ref.imag], -1)[None].astype(np.float32)
    return bool(np.abs(got - ref).max() <= max(DEFAULT_TOLERANCE, rounding_floor(ref)))


@functools.cache
def _onnxruntime_col2im_dilation_ok() -> bool:
    """Asked of the installed onnxruntime (in the worker): a 2-channel 1-D Col2Im with dilation 2
    against the reference."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], dilations=[2], strides=[1], pads=[0, 0])
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([9], np.int64), "image"),
                               numpy_helper.from_array(np.array([3], np.int64), "block")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = np.arange(30, dtype=np.float32).reshape(1, 6, 5)  # two channels: one alone comes out right
    try:

        with runtime_worker.describing("a Col2Im probe"):
            got = session_mod.session(m, None, tuned=False).run(None, {"x": x})[0]
    except Exception:  # noqa: BLE001 - cannot run it: do not trust it
        return False
    return bool(np.allclose(got, ReferenceEvaluator(m).run(None, {"x": x})[0]))


def unusable(first: list, second: list, names: list[str]) -> str | None:
    """Why outputs at a candidate shape cannot judge a rewrite, if they cannot: the original model
    gives different values on two identical runs (onnxruntime itself is nondeterministic there:
    Swin at 4x4 gave 2.08, NaN or 0.0), or its float outputs are degenerate (one all NaN/inf,
    or every one constant)."""
    arrays = [(name, np.asarray(a), np.asarray(b)) for name, a, b in zip(names, first, second, strict=False)]
    for name, a, b in arrays:
        if a.shape != b.shape or not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
            return f"onnxruntime's outputs for the original model differ between two identical runs ({name})"
    floats = [(name, a) for name, a, _ in arrays if a.dtype.kind == "f" and a.size]
    for name, a in floats:
        if not np.isfinite(a).any():
            return f"output {name} is all NaN/inf there"
    if floats and all(a.size > 1 and bool(np.all(a == a.flat[0])) for _, a in floats):
        return "every float output is constant there"
    return None


#: The configuration users run: what polygraphy's onnxrt runner and a plain InferenceSession use.
USERS_SETTINGS = "onnxruntime's default session settings (graph optimizations on)"


def on_onnxruntime(model: onnx.ModelProto | Assembled) -> bool:
    """Whether verification runs ``model`` on onnxruntime (not on the ONNX reference evaluator:
    ATen nodes, ops the installed onnxruntime computes wrongly)."""
    parts = Assembled.of(model)
    return not _wrong_in_onnxruntime(parts.stub, parts.initializers)


def users_run(model: onnx.ModelProto | Assembled, feeds: Feeds, name: str, counter: SessionCounter,
              base_dir=None) -> RunResults:
    """One session of ``model`` under :data:`USERS_SETTINGS` (graph optimizations on: onnxruntime's
    fusions, e.g. DivMulFusion, apply), run on every feed."""
    return _compare_run(Assembled.of(model).compatible(), feeds, name, counter, base_dir, tuned=False)


def switched_run(model: onnx.ModelProto, feeds: Feeds, counter: SessionCounter, base_dir=None) -> RunResults:
    """``model`` under the session settings verification's sessions do not use (onnxruntime's
    defaults, unless the model needed them everywhere), on ``feeds`` then :func:`nudged_feeds`.
    One session per (model, feeds): the noise floor and the reference under the users' settings
    (:func:`users_run`) share it."""
    cached = counter.switched
    if cached is not None and cached[0] is model and cached[1] is feeds:
        return cached[2]
    # kept for the run (the nudged half read only for a noise floor): big outputs wait in a file
    results = _compare_run(Assembled.of(model).compatible(), [*feeds, *nudged_feeds(feeds)], "graphfix-original", counter,
                           base_dir, not counter.tuned, kept=True)
    counter.switched = (model, feeds, results)
    return results


def noise_floor(model: onnx.ModelProto, feeds: Feeds, baseline: RunResults, counter: SessionCounter,
                base_dir=None, ran: RunResults | None = None) -> dict[str, float]:
    """How far the original model's float outputs move under changes that are correct by
    construction: onnxruntime's graph optimizations switched (its fusions round differently), and
    every float input moved by one ulp (how much the model amplifies rounding). Max abs per output;
    one more session, made only when the strict end-to-end comparison failed (``ran``: that run,
    already made on ``feeds`` then :func:`nudged_feeds`, e.g. the run under the users' settings).
    Where the reference evaluator is the reference (an op onnxruntime computes wrongly), only the
    nudge applies: an STFT output of 1000-sample frames moves by ~1.5e-5 when its inputs move by one ulp."""
    parts = Assembled.of(model)
    if any(n.op_type == "ATen" for n in parts.stub.graph.node):
        return {}
    try:
        if not on_onnxruntime(parts):

            results = run_results(parts.proto(), [*feeds, *nudged_feeds(feeds)], "graphfix-noise")
        else:
            results = ran or switched_run(model, feeds, counter, base_dir)
    except GraphfixError:
        raise
    except Exception:  # noqa: BLE001 - no noise floor: the strict comparison stands
        return {}
    runs, n, floor = iterations(results), len(feeds), {}
    for k, base in enumerate(iterations(baseline)):
        for name in base:
            ref = np.asarray(base[name])
            if ref.dtype.kind == "f" and name in runs[k]:
                moved = max(finite_max_abs(ref, np.asarray(runs[k][name])), finite_max_abs(ref, np.asarray(runs[n + k][name])))
                floor[name] = max(floor.get(name, 0.0), moved)
    spill.release(results)
    return floor


def run_pair(model: onnx.ModelProto, candidate: onnx.ModelProto, feeds: Feeds, name: str, counter: SessionCounter,
             base_dir: str | None) -> tuple[RunResults, RunResults]:
    """The original and a whole-model step's result on the same feeds; a failure of onnxruntime
    (its errors are many types) is :class:`CannotRun` with its first line, graphfix's own pass through."""
    try:
        return run(model, feeds, "original", counter, base_dir), run(candidate, feeds, name, counter, base_dir)
    except GraphfixError:
        raise
    except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types
        raise CannotRun(first_line(exc)) from exc
